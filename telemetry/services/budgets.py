"""The budget ledger (issue 14): holds before generation, charges after, exact across workers.

Every change to a budget's period row (`BudgetSpend`) happens in one short transaction that
holds its row lock (`SELECT … FOR UPDATE` on Postgres), so two workers holding at once are
serialized by the database and `spent + held` never passes the budget. Locks are always taken
in one order — holds by run id, then period rows by id — so two transactions never wait on
each other in a circle.

On Postgres the holds a worker takes together (those of one event-loop pass, or that arrived
while the previous batch was committing) and a batch's settlement are each one call of a
function (`mortar_budget_holds`, `mortar_budget_settle`: migrations 0009 and 0011), one round
trip and one commit where the same steps from Python took seven or eight a request — and one
row lock held across one commit for the whole batch, not one per request; the run writer
settles the runs it stores, in the transaction that stores their outcomes. SQLite (the
embedded mode: one process) runs the same ledger in Python below, with no row locks: a
process-wide lock serializes its transactions.

Amounts are Decimal USD to the micro-dollar: a hold is rounded up (it must cover the cost), a
charge is the cost rounded up and never more than its hold (so the charges of a period never
pass its budget, whatever a model server reports).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

import orjson
import psycopg
from django.db import connection, transaction
from psycopg.types.json import Jsonb

from core.errors import InsufficientQuota
from telemetry.costs import PER_MILLION, Prices
from telemetry.models import BudgetHold, BudgetSpend, Run

logger = logging.getLogger(__name__)

MICRO = Decimal("0.000001")
TOTAL_PERIOD_START = date(1970, 1, 1)
# How many expired holds one reconciliation pass settles at most (the next pass does the rest).
RECONCILE_BATCH = 1000

_sqlite_lock = threading.Lock()


@dataclass(frozen=True)
class Budget:
    """One budget a request must fit: an organization's or a key's."""

    owner: str  # BudgetSpend.Owner
    owner_id: int
    usd: Decimal
    period: str  # day | month | total


@dataclass(frozen=True)
class Held:
    """What a hold took: the output cap it pays for, its amount, and the prompt's part; and
    what the tightest budget had left before it (where the worker's slices start from)."""

    max_tokens: int
    amount_usd: Decimal
    prompt_usd: Decimal
    remaining_usd: Decimal


@dataclass(frozen=True)
class Standing:
    """Where a budget stands in its current period."""

    budget_usd: Decimal
    period: str
    spent_usd: Decimal
    held_usd: Decimal
    remaining_usd: Decimal
    resets_at: datetime | None


def to_micro(amount: Decimal) -> Decimal:
    """Round up to the micro-dollar."""
    return amount.quantize(MICRO, rounding=ROUND_CEILING)


def period_start(period: str, now: datetime) -> date:
    if period == "day":
        return now.astimezone(UTC).date()
    if period == "month":
        return now.astimezone(UTC).date().replace(day=1)
    return TOTAL_PERIOD_START


def resets_at(period: str, now: datetime) -> datetime | None:
    """When the period's spend starts again from zero (UTC midnight); never for `total`."""
    start = period_start(period, now)
    if period == "day":
        following = start + timedelta(days=1)
    elif period == "month":
        following = (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    else:
        return None
    return datetime(following.year, following.month, following.day, tzinfo=UTC)


@contextmanager
def _serialized() -> Iterator[None]:
    """One ledger transaction; on SQLite, one at a time in this process."""
    if connection.vendor == "sqlite":
        with _sqlite_lock, transaction.atomic():
            yield
    else:
        with transaction.atomic():
            yield


def _locked_spend(budget: Budget, now: datetime) -> BudgetSpend:
    """The budget's row for the current period, locked; created by the period's first hold."""
    fields = {
        "owner": budget.owner,
        "owner_id": budget.owner_id,
        "period": budget.period,
        "period_start": period_start(budget.period, now),
    }
    row = BudgetSpend.objects.select_for_update().filter(**fields).first()
    if row is None:
        # Two first holds at once: one insert wins, the other is ignored; both then lock it.
        BudgetSpend.objects.bulk_create([BudgetSpend(**fields)], ignore_conflicts=True)
        row = BudgetSpend.objects.select_for_update().get(**fields)
    return row


@dataclass(frozen=True)
class HoldRequest:
    """One request's hold to take: what it may cost, on which budgets, until when."""

    run_id: str
    budgets: Sequence[Budget]  # the organization's before the key's
    prompt_tokens: int
    max_tokens: int
    prices: Prices
    expires_at: datetime

    @property
    def prompt_cost(self) -> Decimal:
        return self.prompt_tokens * self.prices.input / PER_MILLION

    @property
    def per_token(self) -> Decimal:
        return self.prices.output / PER_MILLION


def budget_holds(
    requests: Sequence[HoldRequest], *, now: datetime
) -> list[Held | InsufficientQuota]:
    """Take each request's hold — the prompt and the output cap on every budget, the cap
    lowered to what the tightest can pay — in order (on Postgres in one transaction); answer,
    in the requests' order, what each held or the refusal of one that cannot pay its prompt
    and one token."""
    if connection.vendor == "postgresql":
        return _postgres_holds(requests, now=now)
    answers: list[Held | InsufficientQuota] = []
    for request in requests:
        try:
            answers.append(_sqlite_hold(request, now=now))
        except InsufficientQuota as refusal:
            answers.append(refusal)
    return answers


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


def _sqlite_hold(request: HoldRequest, *, now: datetime) -> Held:
    run_id, budgets, max_tokens = request.run_id, request.budgets, request.max_tokens
    prompt_cost, per_token, expires_at = request.prompt_cost, request.per_token, request.expires_at
    with _serialized():
        rows = [(budget, _locked_spend(budget, now)) for budget in budgets]
        remaining = min(budget.usd - row.spent_usd - row.held_usd for budget, row in rows)
        if prompt_cost + per_token > remaining:
            raise _refusal(prompt_cost + per_token, remaining)
        cap = max_tokens
        if per_token > 0:
            cap = min(cap, int((remaining - prompt_cost) / per_token))
            if prompt_cost + cap * per_token > remaining:  # the division rounded up
                cap -= 1
        amount = to_micro(prompt_cost + cap * per_token)
        for _, row in rows:
            row.held_usd += amount
            row.save(update_fields=["held_usd"])
        by_owner = {budget.owner: row for budget, row in rows}
        BudgetHold.objects.create(
            run_id=run_id,
            organization_spend=by_owner.get(BudgetSpend.Owner.ORGANIZATION),
            key_spend=by_owner.get(BudgetSpend.Owner.KEY),
            amount_usd=amount,
            prompt_usd=to_micro(prompt_cost),
            expires_at=expires_at,
        )
    return Held(
        max_tokens=cap, amount_usd=amount, prompt_usd=to_micro(prompt_cost), remaining_usd=remaining
    )


def _refusal(needed: Decimal, remaining: Decimal) -> InsufficientQuota:
    return InsufficientQuota(
        f"This request needs at least ${to_micro(needed)} (its prompt and one output token); "
        f"the budget has ${to_micro(max(remaining, Decimal(0)))} left. See GET /v1/budget."
    )


@contextmanager
def _server_bound_cursor() -> Iterator[psycopg.Cursor[Any]]:
    """psycopg's own cursor on this thread's connection, binding parameters on the server so
    a statement is prepared once (Django's cursor quotes them into the text, in Python: three
    times the cost of the call); its errors still become Django's."""
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


_HOLDS = "SELECT run_id, max_tokens, amount_usd, remaining_usd FROM mortar_budget_holds(%s)"


def _budget_fields(prefix: str, budget: Budget | None, now: datetime) -> dict[str, object]:
    if budget is None:
        return {}  # absent: NULL in the function's record, that owner has no budget
    return {
        f"{prefix}_id": budget.owner_id,
        f"{prefix}_period": budget.period,
        f"{prefix}_start": period_start(budget.period, now),
        f"{prefix}_usd": str(budget.usd),
    }


def _postgres_holds(
    requests: Sequence[HoldRequest], *, now: datetime
) -> list[Held | InsufficientQuota]:
    # One jsonb parameter, encoded in C (orjson): psycopg's adaptation of thirteen parameters
    # a request, in Python, cost more than the function's work.
    items = []
    for request in requests:
        by_owner = {budget.owner: budget for budget in request.budgets}
        items.append(
            {
                "run_id": request.run_id,
                **_budget_fields("organization", by_owner.get(BudgetSpend.Owner.ORGANIZATION), now),
                **_budget_fields("key", by_owner.get(BudgetSpend.Owner.KEY), now),
                "prompt_cost": str(request.prompt_cost),
                "per_token": str(request.per_token),
                "max_tokens": request.max_tokens,
                "expires_at": request.expires_at,
            }
        )
    with _server_bound_cursor() as cursor:
        rows = cursor.execute(_HOLDS, [Jsonb(items, dumps=orjson.dumps)], prepare=True).fetchall()
    held = {run_id: (cap, amount, remaining) for run_id, cap, amount, remaining in rows}
    answers: list[Held | InsufficientQuota] = []
    for request in requests:
        cap, amount, remaining = held[request.run_id]
        prompt_cost = request.prompt_cost
        if cap < 0:
            answers.append(_refusal(prompt_cost + request.per_token, remaining))
        else:
            answers.append(
                Held(
                    max_tokens=cap,
                    amount_usd=amount,
                    prompt_usd=to_micro(prompt_cost),
                    remaining_usd=remaining,
                )
            )
    return answers


_RELEASE = "SELECT mortar_budget_release(%s, %s)"


def budget_slice_release(slice_id: str, amount: Decimal) -> None:
    """Give back what a worker reserved in a slice and did not draw (its own transaction)."""
    with transaction.atomic(), _server_bound_cursor() as cursor:
        cursor.execute(_RELEASE, [slice_id, amount], prepare=True)


def charge_for(cost: Decimal, held: Decimal) -> Decimal:
    """What a run is charged: its cost to the micro-dollar, never more than it held."""
    return min(to_micro(cost), held)


def _settle(hold: BudgetHold, cost: Decimal) -> Decimal:
    """Charge and release one locked hold; return the charge."""
    charged = charge_for(cost, hold.amount_usd)
    spend_ids = [i for i in (hold.organization_spend_id, hold.key_spend_id) if i is not None]
    for row in BudgetSpend.objects.select_for_update().filter(id__in=spend_ids).order_by("id"):
        row.held_usd -= hold.amount_usd
        row.spent_usd += charged
        row.save(update_fields=["held_usd", "spent_usd"])
    hold.delete()
    return charged


_SETTLE = "SELECT run_id, charged_usd FROM mortar_budget_settle(%s)"


def budget_holds_settle(costs: Sequence[tuple[str, Decimal]]) -> dict[str, Decimal]:
    """Charge runs their costs and release the rest of their holds, in the caller's
    transaction (the run writer's); return what was charged, by run. A run with no hold left
    (never held, or settled already: settling is safe to repeat) is not in the answer."""
    if not costs:
        return {}
    if connection.vendor == "postgresql":
        costs_json = Jsonb(
            [{"run_id": run_id, "cost": str(cost)} for run_id, cost in costs], dumps=orjson.dumps
        )
        with _server_bound_cursor() as cursor:
            return dict(cursor.execute(_SETTLE, [costs_json], prepare=True).fetchall())
    # SQLite: the caller's transaction is IMMEDIATE, so it already excludes every other
    # writer (taking the process lock here, inside it, could wait on a hold that waits on it).
    charged = {}
    for run_id, cost in sorted(costs):
        hold = BudgetHold.objects.select_for_update().filter(run_id=run_id).first()
        if hold is not None:
            charged[run_id] = _settle(hold, cost)
    return charged


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
        with _serialized():
            hold = (
                BudgetHold.objects.select_for_update()
                .filter(run_id=run_id, expires_at__lte=now)
                .first()
            )
            if hold is None:
                continue  # settled meanwhile by its own worker
            charged = _settle(hold, _reconciled_cost(run_id, hold))
            Run.objects.filter(id=run_id).update(held_usd=hold.amount_usd, charged_usd=charged)
            settled += 1
    return settled


def budget_standing(budget: Budget, *, now: datetime) -> Standing:
    """The budget's spend, holds and what is left in the current period."""
    row = (
        BudgetSpend.objects.filter(
            owner=budget.owner,
            owner_id=budget.owner_id,
            period=budget.period,
            period_start=period_start(budget.period, now),
        )
        .values_list("spent_usd", "held_usd")
        .first()
    )
    spent, held = row if row is not None else (Decimal(0), Decimal(0))
    return Standing(
        budget_usd=budget.usd,
        period=budget.period,
        spent_usd=spent,
        held_usd=held,
        remaining_usd=max(budget.usd - spent - held, Decimal(0)),
        resets_at=resets_at(budget.period, now),
    )
