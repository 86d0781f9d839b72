"""The Keys page: every API key with when it was last used and what it spent, and the audit.

"Last used" is the newest run of the key (one probe of the `run_key_accepted` index per key):
no request writes to its key's row. Spend is summed as the Overview sums it — the hourly
rollups before the hour of their last refresh, the runs themselves from that hour on
(`dashboard.selectors.overview.fresh_since`) — so a request counts the moment its run is stored
and a key's total never scans its runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.db.models import F, OuterRef, Subquery, Sum
from django.utils import timezone

from accounts.models import ApiKey, KeyChange, SpendLimits
from dashboard.selectors.overview import fresh_since
from dashboard.selectors.scope import of_organizations
from telemetry.models import Run, UsageRollup
from telemetry.services.rollups import usage_rollups_watermark

AUDIT_ENTRIES = 50
PERIOD_LABELS: dict[str, str] = {
    SpendLimits.BudgetPeriod.DAY.value: "today",
    SpendLimits.BudgetPeriod.MONTH.value: "this month",
    SpendLimits.BudgetPeriod.TOTAL.value: "in total",
}


@dataclass(frozen=True)
class KeyRow:
    """One key as the Keys page lists it."""

    key: ApiKey  # with its organization
    last_used: datetime | None
    period: str  # the key's budget period, else the calendar month
    spent_period: Decimal
    spent_total: Decimal

    @property
    def period_label(self) -> str:
        return PERIOD_LABELS.get(self.period, self.period)


def period_start(period: str, *, now: datetime) -> datetime | None:
    """Where the period holding `now` began (UTC), or None for `total`."""
    now = now.astimezone(UTC)
    if period == SpendLimits.BudgetPeriod.DAY:
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == SpendLimits.BudgetPeriod.TOTAL:
        return None
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def key_rows(
    *, now: datetime | None = None, organizations: frozenset[int] | None = None
) -> list[KeyRow]:
    """Every key (of `organizations`; None: every one), active ones first, each
    organization's together, newest first within it."""
    now = now or timezone.now()
    newest_run = (
        Run.objects.filter(api_key=OuterRef("pk")).order_by("-accepted_at").values("accepted_at")
    )
    keys = list(
        of_organizations(ApiKey.objects.select_related("organization"), None, organizations)
        .annotate(last_used=Subquery(newest_run[:1]))
        .order_by(F("revoked_at").asc(nulls_first=True), "organization__name", "-created_at", "-id")
    )
    ids = [key.pk for key in keys]
    recent = fresh_since(now, usage_rollups_watermark())
    total = _spend_by_key(ids, since=None, recent=recent)
    # One query per period the page's keys use (at most three), not one per key.
    starts = {key.budget_period if key.budget_usd is not None else "month" for key in keys}
    by_period = {
        period: _spend_by_key(ids, since=period_start(period, now=now), recent=recent)
        for period in starts
    }
    rows = []
    for key in keys:
        period = key.budget_period if key.budget_usd is not None else "month"
        rows.append(
            KeyRow(
                key=key,
                last_used=getattr(key, "last_used", None),
                period=period,
                spent_period=by_period[period].get(key.pk, Decimal(0)),
                spent_total=total.get(key.pk, Decimal(0)),
            )
        )
    return rows


def _spend_by_key(
    ids: Iterable[int], *, since: datetime | None, recent: datetime
) -> dict[int, Decimal]:
    """Cost per key from `since` (None: ever): rollups before `recent`, runs from it on."""
    ids = list(ids)
    if not ids:
        return {}
    rollups = UsageRollup.objects.filter(api_key_id__in=ids, hour__lt=recent)
    runs = Run.objects.filter(api_key_id__in=ids, accepted_at__gte=recent).exclude(
        status=Run.Status.IN_PROGRESS  # counted once it has an outcome, as the rollups do
    )
    if since is not None:
        rollups = rollups.filter(hour__gte=since)
        runs = runs.filter(accepted_at__gte=since)
    spent: dict[int, Decimal] = {}
    for rows in (rollups, runs):
        sums = rows.values("api_key_id").annotate(cost_sum=Sum("cost")).order_by()
        for key_id, cost in sums.values_list("api_key_id", "cost_sum"):
            spent[key_id] = spent.get(key_id, Decimal(0)) + (cost or Decimal(0))
    return spent


def key_changes(
    *, limit: int = AUDIT_ENTRIES, organizations: frozenset[int] | None = None
) -> list[KeyChange]:
    """The latest changes made to keys (of `organizations`; None: every one), newest first,
    with their key and organization."""
    changes = KeyChange.objects.select_related("key__organization")
    if organizations is not None:
        changes = changes.filter(key__organization_id__in=organizations)
    return list(changes.order_by("-at", "-id")[:limit])
