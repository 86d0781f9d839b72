"""Spend against budget for every organization and key that has one, as the Budgets page
shows it (the standings: `billing.selectors`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from billing.ledger.entries import Standing
from billing.selectors import budget_standings


@dataclass(frozen=True)
class BudgetRow:
    """One budget as the dashboard shows it: whose, and where it stands."""

    kind: str  # organization | key
    name: str
    organization: str
    standing: Standing

    @property
    def used_percent(self) -> int:
        """Spent and held against the budget, 0 to 100, for the bar."""
        budget = self.standing.budget_usd
        if budget <= 0:
            return 100
        used = (self.standing.spent_usd + self.standing.held_usd) / budget * 100
        return int(min(used, Decimal(100)))


def budget_rows(*, now: datetime, organizations: frozenset[int] | None = None) -> list[BudgetRow]:
    """Every organization's budget (of `organizations`; None: every one), each followed by its
    keys' budgets."""
    rows = []
    for owned in budget_standings(now=now):
        if organizations is not None and owned.organization.pk not in organizations:
            continue
        organization, key = owned.organization.name, owned.key
        if key is None:
            rows.append(BudgetRow("organization", organization, organization, owned.standing))
        else:
            name = f"{key.name or 'key'} ({key.prefix}…)"
            rows.append(BudgetRow("key", name, organization, owned.standing))
    return rows
