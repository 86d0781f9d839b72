"""Spend against budget for every organization and key that has one (issue 14)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from accounts.models import ApiKey, Organization
from telemetry.models import BudgetSpend
from telemetry.services.budgets import Budget, Standing, budget_standing


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


def budget_rows(*, now: datetime) -> list[BudgetRow]:
    """Every organization's budget, each followed by its keys' budgets."""
    rows: list[BudgetRow] = []
    keys = ApiKey.objects.filter(budget_usd__isnull=False).select_related("organization")
    keys_by_org: dict[int, list[ApiKey]] = {}
    for key in keys.order_by("organization__name", "name", "id"):
        keys_by_org.setdefault(key.organization_id, []).append(key)
    organizations = Organization.objects.filter(id__in=keys_by_org) | Organization.objects.filter(
        budget_usd__isnull=False
    )
    for organization in organizations.order_by("name"):
        if organization.budget_usd is not None:
            budget = Budget(
                BudgetSpend.Owner.ORGANIZATION,
                organization.id,
                organization.budget_usd,
                organization.budget_period,
            )
            standing = budget_standing(budget, now=now)
            rows.append(BudgetRow("organization", organization.name, organization.name, standing))
        for key in keys_by_org.get(organization.id, []):
            assert key.budget_usd is not None
            budget = Budget(BudgetSpend.Owner.KEY, key.id, key.budget_usd, key.budget_period)
            rows.append(
                BudgetRow(
                    "key",
                    f"{key.name or 'key'} ({key.prefix}…)",
                    organization.name,
                    budget_standing(budget, now=now),
                )
            )
    return rows
