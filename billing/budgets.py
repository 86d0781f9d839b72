"""What a budget is — whose, how much, for which period — and which budgets a key's requests
must fit: its organization's and its own, each when set."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from accounts.models import ApiKey, Organization
from billing.models import BudgetSpend
from core.derived import PerObject

TOTAL_PERIOD_START = date(1970, 1, 1)


@dataclass(frozen=True)
class Budget:
    """One budget a request must fit: an organization's or a key's."""

    owner: str  # BudgetSpend.Owner
    owner_id: int
    usd: Decimal
    period: str  # day | month | total


def organization_budget(organization: Organization) -> Budget | None:
    if organization.budget_usd is None:
        return None
    return Budget(
        BudgetSpend.Owner.ORGANIZATION,
        organization.id,
        organization.budget_usd,
        organization.budget_period,
    )


def key_budget(key: ApiKey) -> Budget | None:
    if key.budget_usd is None:
        return None
    return Budget(BudgetSpend.Owner.KEY, key.id, key.budget_usd, key.budget_period)


def _budgets_of(key: ApiKey) -> tuple[Budget, ...]:
    budgets = (organization_budget(key.organization), key_budget(key))
    return tuple(budget for budget in budgets if budget is not None)


# The budgets a request with this key must fit, in the ledger's lock order: once per key
# object (a changed key or organization is a new object: core.derived).
budgets_for = PerObject(_budgets_of)


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
