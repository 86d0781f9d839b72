"""The budget ledger's writes: take holds, settle charges, give back slices, reconcile.

How the ledger stays exact, and its two implementations: `billing.ledger`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from billing.budgets import Budget
from billing.costs import Prices, charge_for
from billing.errors import InsufficientQuota
from billing.ledger import ledger
from billing.ledger.entries import Held, HoldRequest, Settlement
from billing.ledger.rows import hold_settle
from billing.models import BudgetHold
from telemetry.models import Run

# How many expired holds one reconciliation pass settles at most (the next pass does the rest).
RECONCILE_BATCH = 1000


def budget_holds(
    requests: Sequence[HoldRequest], *, now: datetime
) -> list[Held | InsufficientQuota]:
    """Take each request's hold — the prompt and the output cap on every budget, the cap
    lowered to what the tightest can pay — in order (on Postgres in one transaction); answer,
    in the requests' order, what each held or the refusal of one that cannot pay its prompt
    and one token."""
    return ledger().holds(requests, now=now)


def budget_hold(
    *,
    run_id: str,
    budgets: Sequence[Budget],
    prompt_tokens: int,
    max_tokens: int,
    prices: Prices,
    expires_at: datetime,
    now: datetime,
) -> Held:
    """Hold one request's cost (`budget_holds`); raise InsufficientQuota to refuse it."""
    request = HoldRequest(run_id, budgets, prompt_tokens, max_tokens, prices, expires_at)
    [answer] = budget_holds([request], now=now)
    if isinstance(answer, InsufficientQuota):
        raise answer
    return answer


def budget_slice_release(slice_id: str, amount: Decimal) -> None:
    """Give back what a worker reserved in a slice and did not draw (its own transaction)."""
    ledger().release_slice(slice_id, amount)


def budget_holds_settle(settlements: Sequence[Settlement]) -> dict[str, Decimal]:
    """Charge runs what their closes decided and release the rest of their holds, all at once
    (one transaction, or the caller's); return what was charged, by run. A run with no hold
    left (never held, or settled already: settling is safe to repeat) is not in the answer; a
    charge outside its hold refuses the whole batch (IntegrityError)."""
    if not settlements:
        return {}
    return ledger().settle(settlements)


def budget_holds_settle_batch(settlements: Sequence[Settlement]) -> int:
    """`budget_holds_settle` for a worker's batch, which reads no charge back: how many runs
    were settled."""
    if not settlements:
        return 0
    return ledger().settle_batch(settlements)


# A run in these states was generating when its worker was killed: the model server had its
# prompt, whatever else was stored.
_CUT_SHORT = (Run.Status.IN_PROGRESS, Run.Status.INTERRUPTED)


def _reconciled_cost(run_id: str, hold: BudgetHold) -> Decimal:
    """What an expired hold's run cost, from what was stored of it: its cost when it closed
    with one; nothing when it closed without (it never reached generation); else — still in
    progress, interrupted (its worker killed), or never stored — its stored cost, or the
    prompt alone when it has none, which the model server had received."""
    stored = Run.objects.filter(id=run_id).values_list("status", "cost").first()
    if stored is None or stored[0] in _CUT_SHORT:
        return hold.prompt_usd if stored is None or stored[1] is None else stored[1]
    return stored[1] if stored[1] is not None else Decimal(0)


def budget_holds_reconcile(*, now: datetime) -> int:
    """Settle the holds that expired (their worker died): charge the run's stored cost, or the
    prompt alone when the run left no usage; return how many were settled."""
    expired = list(
        BudgetHold.objects.filter(expires_at__lte=now).values_list("run_id", flat=True)[
            :RECONCILE_BATCH
        ]
    )
    settled = 0
    for run_id in expired:
        with ledger().transaction():
            hold = (
                BudgetHold.objects.select_for_update()
                .filter(run_id=run_id, expires_at__lte=now)
                .first()
            )
            if hold is None:
                continue  # settled meanwhile by its own worker
            if hold.organization_spend_id is None and hold.key_spend_id is None:
                # A marker of a run settled before its row was stored (the row never came):
                # nothing is held, and the run's own charge stands.
                hold.delete()
                continue
            # Its run's close never settled it (its worker died): the charge is decided here.
            cost = _reconciled_cost(run_id, hold)
            charged = hold_settle(hold, charge_for(cost, hold.amount_usd))
            Run.objects.filter(id=run_id).update(held_usd=hold.amount_usd, charged_usd=charged)
            settled += 1
    return settled
