"""The ledger on SQLite (the embedded mode, one process): the SQL functions beside this module
(`sql/`), in Python.

The same steps, the same arithmetic and the same checks as `mortar_budget_hold` and
`mortar_budget_settle`, so the ledger's tests hold on both databases. SQLite has no row locks:
a process-wide lock serializes the ledger's transactions (the embedded mode is one process). No
slices: on SQLite a worker holds every request from the ledger itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal

from django.db import transaction

from billing.budgets import Budget, period_start
from billing.costs import to_micro
from billing.errors import InsufficientQuota
from billing.ledger import refusal
from billing.ledger.entries import Held, HoldRequest, Settlement
from billing.ledger.rows import hold_settle
from billing.models import BudgetHold, BudgetSpend

_lock = threading.Lock()


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


class SqliteLedger:
    slices = False

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with _lock, transaction.atomic():
            yield

    def holds(
        self, requests: Sequence[HoldRequest], *, now: datetime
    ) -> list[Held | InsufficientQuota]:
        answers: list[Held | InsufficientQuota] = []
        for request in requests:
            try:
                answers.append(self._hold(request, now=now))
            except InsufficientQuota as refused:
                answers.append(refused)
        return answers

    def _hold(self, request: HoldRequest, *, now: datetime) -> Held:
        run_id, budgets, max_tokens = request.run_id, request.budgets, request.max_tokens
        prompt_cost, per_token = request.prompt_cost, request.per_token
        with self.transaction():
            rows = [(budget, _locked_spend(budget, now)) for budget in budgets]
            remaining = min(budget.usd - row.spent_usd - row.held_usd for budget, row in rows)
            if prompt_cost + per_token > remaining:
                raise refusal(prompt_cost + per_token, remaining)
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
                expires_at=request.expires_at,
            )
        return Held(
            max_tokens=cap,
            amount_usd=amount,
            prompt_usd=to_micro(prompt_cost),
            remaining_usd=remaining,
        )

    def settle(self, settlements: Sequence[Settlement]) -> dict[str, Decimal]:
        # No draws: SQLite's ledger reserves no slices.
        charged = {}
        with self.transaction():
            for settlement in sorted(settlements, key=lambda s: s.run_id):
                run_id = settlement.run_id
                hold = BudgetHold.objects.select_for_update().filter(run_id=run_id).first()
                if hold is not None:
                    charged[run_id] = hold_settle(hold, settlement.charged_usd)
        return charged

    def settle_batch(self, settlements: Sequence[Settlement]) -> int:
        return len(self.settle(settlements))

    def release_slice(self, slice_id: str, amount: Decimal) -> None:
        raise NotImplementedError("SQLite's ledger reserves no slices (`slices` is False)")
