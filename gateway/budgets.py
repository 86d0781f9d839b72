"""Budgets on the request path (issue 14): hold before generation, charge when the run ends.

The ledger itself is `telemetry.services.budgets`; this module decides which budgets a request
must fit (its organization's and its key's) and takes the hold off the event loop. When the run
closes, its charge is part of its outcome, and the run writer settles the hold in the commit
that stores it. A settlement that never happens (the worker died) is not lost: the hold expires
and `budget_holds_reconcile` charges it from the run's stored usage.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import DatabaseError

from accounts.models import ApiKey
from core.db import database_call_on, database_read
from core.errors import BackendUnavailable
from telemetry.costs import Prices
from telemetry.models import BudgetSpend
from telemetry.services.budgets import (
    Budget,
    Standing,
    budget_hold,
    budget_standing,
    charge_for,
    to_micro,
)

logger = logging.getLogger(__name__)

# The ledger's threads, each keeping its own connection: holds wait on the database's commit,
# so a few run at once (they queue on the budget's row lock anyway).
LEDGER_THREADS = ThreadPoolExecutor(4, thread_name_prefix="mortar-ledger")

# A hold outlives its generation by this much before the reconciliation may settle it: a
# generation never runs past its deployment's total timeout, and the run's row needs a moment
# to reach the database after it ends (README, "Budgets and holds").
HOLD_MARGIN = timedelta(seconds=60)


def budgets_for(key: ApiKey) -> list[Budget]:
    """The budgets a request with this key must fit, in the ledger's lock order."""
    budgets = []
    organization = key.organization
    if organization.budget_usd is not None:
        budgets.append(
            Budget(
                BudgetSpend.Owner.ORGANIZATION,
                organization.id,
                organization.budget_usd,
                organization.budget_period,
            )
        )
    if key.budget_usd is not None:
        budgets.append(Budget(BudgetSpend.Owner.KEY, key.id, key.budget_usd, key.budget_period))
    return budgets


def costs_something(prices: Prices) -> bool:
    return prices.input > 0 or prices.cached_input > 0 or prices.output > 0


@dataclass
class HeldBudget:
    """A run's hold, charged once: the first charge counts, later ones are no-ops."""

    run_id: str
    amount_usd: Decimal
    max_tokens: int
    charged_usd: Decimal | None = None

    def charge(self, cost: Decimal) -> Decimal:
        """What the run is charged for `cost` (capped at the hold): its `charged_usd`, which
        the run writer settles on its budgets when it stores the run's outcome."""
        if self.charged_usd is None:
            self.charged_usd = charge_for(cost, self.amount_usd)
        return self.charged_usd


async def hold_for(
    *,
    run_id: str,
    key: ApiKey,
    prompt_tokens: int,
    max_tokens: int,
    prices: Prices,
    total_timeout_s: float,
) -> HeldBudget | None:
    """Hold what the request may cost on its budgets; None when none applies or the model
    costs nothing (never refused for budget). Raises InsufficientQuota."""
    budgets = budgets_for(key)
    if not budgets or not costs_something(prices):
        return None
    now = datetime.now(UTC)
    try:
        held = await database_call_on(
            LEDGER_THREADS,
            lambda: budget_hold(
                run_id=run_id,
                budgets=budgets,
                prompt_tokens=prompt_tokens,
                max_tokens=max_tokens,
                prices=prices,
                expires_at=now + timedelta(seconds=total_timeout_s) + HOLD_MARGIN,
                now=now,
            ),
        )
    except DatabaseError as away:
        # Without the ledger no one can tell what the budget can pay: nothing is sent. (A hold
        # whose commit was acknowledged to no one, tried again, fails on its run id: its hold
        # expires and is released by the reconciliation.)
        logger.warning("budget: no hold for %s: %s", run_id, away)
        raise BackendUnavailable(
            "The budget ledger cannot be reached right now; the request was not sent to the "
            "model. Retry in a moment."
        ) from away
    return HeldBudget(run_id=run_id, amount_usd=held.amount_usd, max_tokens=held.max_tokens)


def _decimal_text(amount: Decimal) -> str:
    return f"{to_micro(amount):f}"


def standing_body(standing: Standing) -> dict[str, str | None]:
    return {
        "budget_usd": _decimal_text(standing.budget_usd),
        "period": standing.period,
        "spent_usd": _decimal_text(standing.spent_usd),
        "held_usd": _decimal_text(standing.held_usd),
        "remaining_usd": _decimal_text(standing.remaining_usd),
        "resets_at": None
        if standing.resets_at is None
        else standing.resets_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


async def budget_report(key: ApiKey) -> dict[str, dict[str, str | None] | None]:
    """`GET /v1/budget`: the organization's and the key's budgets where they stand."""
    now = datetime.now(UTC)

    def read() -> dict[str, dict[str, str | None] | None]:
        report: dict[str, dict[str, str | None] | None] = {"organization": None, "key": None}
        for budget in budgets_for(key):
            report[budget.owner] = standing_body(budget_standing(budget, now=now))
        return report

    return await database_read(read)
