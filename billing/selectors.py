"""Where budgets stand: a key's (`GET /v1/budget`) and every organization's and key's (the
dashboard's Budgets page)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from accounts.models import ApiKey, Organization
from billing.budgets import (
    Budget,
    budgets_for,
    key_budget,
    organization_budget,
    period_start,
    resets_at,
)
from billing.costs import to_micro
from billing.ledger.entries import Standing
from billing.models import BudgetSpend
from core.db import database_read


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


@dataclass(frozen=True)
class OwnerStanding:
    """One budget with its owner: an organization's (`key` None) or one of its keys'."""

    organization: Organization
    key: ApiKey | None
    standing: Standing


def budget_standings(*, now: datetime) -> list[OwnerStanding]:
    """Every organization's budget, each followed by its keys' budgets, in the current period
    (an organization without a budget of its own is listed for its keys' budgets)."""
    standings: list[OwnerStanding] = []
    keys = ApiKey.objects.filter(budget_usd__isnull=False).select_related("organization")
    keys_by_org: dict[int, list[ApiKey]] = {}
    for key in keys.order_by("organization__name", "name", "id"):
        keys_by_org.setdefault(key.organization_id, []).append(key)
    organizations = Organization.objects.filter(id__in=keys_by_org) | Organization.objects.filter(
        budget_usd__isnull=False
    )
    for organization in organizations.order_by("name"):
        budget = organization_budget(organization)
        if budget is not None:
            standing = budget_standing(budget, now=now)
            standings.append(OwnerStanding(organization, None, standing))
        for key in keys_by_org.get(organization.id, []):
            budget = key_budget(key)
            assert budget is not None
            standings.append(OwnerStanding(organization, key, budget_standing(budget, now=now)))
    return standings
