"""The spend page's sums: the rollups (through their breakdowns) before the hours of their last
refresh and the runs from then on, grouped alike and put together in one `UNION ALL` query
(`grouped_sql`), which the breakdowns and charts sum again.

Cache savings are what cached prompt tokens would have cost at the model's input price, less
what they cost at its cached-input price, at the catalog's prices today.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    DecimalField,
    Expression,
    ExpressionWrapper,
    F,
    IntegerField,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, TruncDay, TruncHour

from billing.costs import PER_MILLION
from dashboard.selectors.overview import fresh_since
from dashboard.selectors.scope import of_organizations
from gateway.models import CatalogModel
from telemetry.models import Run, UsageBreakdown, UsageRollup
from telemetry.services.breakdowns import GRAINS_BY_SPAN
from telemetry.services.rollups import IS_ERROR, usage_rollups_watermark

# The breakdowns, and the column each is grouped by in the rollups and in the runs.
DIMENSIONS = ("organization", "key", "end_user", "model", "deployment")
ROLLUP_COLUMN: dict[str, Expression | F] = {
    "organization": F("organization_id"),
    "key": F("api_key_id"),
    "end_user": F("end_user"),
    "model": F("model"),
    "deployment": F("deployment"),
}
RUN_COLUMN: dict[str, Expression | F] = {
    **ROLLUP_COLUMN,
    # 0 for a run without a key, as the rollups store it.
    "key": Coalesce(F("api_key_id"), Value(0), output_field=BigIntegerField()),
}
# The grain of usage breakdowns each breakdown (and its chart) is summed from
# (telemetry/services/breakdowns.py).
GRAIN = {
    "organization": "model",
    "key": "key",
    "end_user": "end_user",
    "model": "model",
    "deployment": "deployment",
}
ZERO = timedelta(0)
NANO = Decimal("1e-9")
MONEY = DecimalField(max_digits=30, decimal_places=9)


@dataclass(frozen=True)
class SpendFilters:
    since: datetime
    until: datetime
    organization_id: int | None = None
    organizations: frozenset[int] | None = None  # those the user sees; None: every one
    bucket: str = "hour"  # or "day": the charts' step


@dataclass
class Usage:
    """One value of a dimension (or the total): its sums over the range."""

    value: Any = None
    label: str = ""
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: Decimal = Decimal(0)
    savings: Decimal = Decimal(0)

    @property
    def error_ratio(self) -> float | None:
        return self.errors / self.requests if self.requests else None

    @property
    def cache_hit_ratio(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None


def _savings_per_token() -> Case | Value:
    """Per cached token, by model: input price less cached-input price (per million)."""
    prices = CatalogModel.objects.values_list("id", "price_input", "price_cached_input")
    whens = [
        When(model=model, then=Value(full - cached))
        for model, full, cached in prices
        if full > cached
    ]
    if not whens:
        return Value(Decimal(0), output_field=MONEY)
    return Case(*whens, default=Value(Decimal(0)), output_field=MONEY)


def _floor_day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Periods:
    """Where the summed rows of a range come from: its whole days from the daily breakdowns,
    its other hours from hourly rows (breakdowns or rollups), and the runs from `fresh` on."""

    hours: list[tuple[datetime, datetime]]
    days: tuple[datetime, datetime] | None
    fresh: datetime


def _periods(filters: SpendFilters, *, days: bool, now: datetime) -> Periods:
    recent = fresh_since(now, usage_rollups_watermark())
    start = filters.since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    # Rolled-up hours are those from `start` before min(until, recent): up to `end`, whole.
    stop = min(filters.until, recent).astimezone(UTC)
    end = stop.replace(minute=0, second=0, microsecond=0)
    end = end if end == stop else end + timedelta(hours=1)
    first_day = _floor_day(start) + (timedelta(days=1) if start != _floor_day(start) else ZERO)
    last_day = _floor_day(end)
    if not days or first_day >= last_day:
        return Periods(hours=[(start, end)] if start < end else [], days=None, fresh=recent)
    hours = [(a, b) for a, b in ((start, first_day), (last_day, end)) if a < b]
    return Periods(hours=hours, days=(first_day, last_day), fresh=recent)


def _summed_sources(
    filters: SpendFilters, grain: str, periods: Periods
) -> list[tuple[QuerySet[Any], str]]:
    """The rows summed before the fresh hours, each query with its time column."""
    org = filters.organization_id
    sources: list[tuple[QuerySet[Any], str]] = []
    if periods.hours:
        if grain in GRAINS_BY_SPAN[UsageBreakdown.Span.HOUR]:
            hourly: QuerySet[Any] = UsageBreakdown.objects.filter(
                _within(periods.hours, "start"), span=UsageBreakdown.Span.HOUR, grain=grain
            )
            time_column = "start"
        else:  # end users by the hour: the rollups themselves (a breakdown would be as large)
            hourly = UsageRollup.objects.filter(_within(periods.hours, "hour"))
            time_column = "hour"
        hourly = of_organizations(hourly, org, filters.organizations)
        sources.append((hourly, time_column))
    if periods.days:
        first, last = periods.days
        every = org is None and filters.organizations is None
        day_grain = "end_user_all" if grain == "end_user" and every else grain
        daily = UsageBreakdown.objects.filter(
            span=UsageBreakdown.Span.DAY, grain=day_grain, start__gte=first, start__lt=last
        )
        daily = of_organizations(daily, org, filters.organizations)
        sources.append((daily, "start"))
    return sources


def _within(ranges: list[tuple[datetime, datetime]], column: str) -> Q:
    """`column` in any of the half-open `ranges`."""
    condition = Q()
    for first, last in ranges:
        condition |= Q(**{f"{column}__gte": first, f"{column}__lt": last})
    return condition


def _fresh_runs(filters: SpendFilters, periods: Periods) -> QuerySet[Run]:
    """The finished runs from the fresh hours on (whole hours)."""
    start = filters.since.replace(minute=0, second=0, microsecond=0)
    runs = Run.objects.filter(
        accepted_at__gte=max(start, periods.fresh), accepted_at__lt=filters.until
    ).exclude(status=Run.Status.IN_PROGRESS)
    runs = of_organizations(runs, filters.organization_id, filters.organizations)
    return runs


# Columns to group by: a name, and its expression over the summed rows and over the runs.
Columns = dict[str, tuple[Expression | F, Expression | F]]


def grouped_by(dimension: str) -> Columns:
    return {f"d_{dimension}": (ROLLUP_COLUMN[dimension], RUN_COLUMN[dimension])}


# A breakdown's values to keep: the chart's lines, the end users whose savings are priced.
Only = tuple[str, list[Any]]
FIELD = {
    "organization": "organization_id",
    "key": "api_key_id",
    "end_user": "end_user",
    "model": "model",
    "deployment": "deployment",
}


def _kept(only: Only, *, runs: bool) -> Q:
    dimension, values = only
    kept = Q(**{f"{FIELD[dimension]}__in": values})
    if runs and dimension == "key" and 0 in values:
        kept |= Q(api_key_id__isnull=True)  # a run without a key is key 0 in the sums
    return kept


def grouped_sql(
    filters: SpendFilters,
    columns: Columns,
    *,
    grain: str,
    by_bucket: bool,
    now: datetime,
    only: Only | None = None,
    day_breakdowns: bool = True,
    fresh_groups: str | None = None,
) -> tuple[str, list[Any]]:
    """The summed rows and the fresh runs grouped alike (the same columns in the same order),
    as one `UNION ALL`; with `only`, the rows of those values only. With `fresh_groups`, the
    name of a CTE of `fresh_groups_sql`, the fresh runs' part sums its groups instead of the
    runs (not by bucket: its groups have none)."""
    # A day's breakdown cannot be cut in hours.
    days = (filters.bucket == "day" or not by_bucket) and day_breakdowns
    periods = _periods(filters, days=days, now=now)
    sources = _summed_sources(filters, grain, periods)
    runs = _fresh_runs(filters, periods)
    if only is not None:
        sources = [(rows.filter(_kept(only, runs=False)), time) for rows, time in sources]
        runs = runs.filter(_kept(only, runs=True))
    saving = _savings_per_token()
    trunc = TruncDay if filters.bucket == "day" else TruncHour
    # No column (the totals): one constant key, so `values()` does not mean every field.
    columns = columns or {"d_all": (Value(0), Value(0))}
    keys = [*columns, *(["bucket"] if by_bucket else [])]
    parts: list[QuerySet[Any]] = []
    for rows, time_column in sources:
        summed = rows.annotate(
            **{name: pair[0] for name, pair in columns.items()},
            **({"bucket": trunc(time_column, tzinfo=UTC)} if by_bucket else {}),
        )
        parts.append(
            summed.values(*keys).annotate(
                s_requests=Sum("requests"),
                s_errors=Sum("errors"),
                s_prompt=Sum("prompt_tokens"),
                s_completion=Sum("completion_tokens"),
                s_cached=Sum("cached_tokens"),
                s_cost=Sum("cost"),
                s_saved=Sum(ExpressionWrapper(F("cached_tokens") * saving, output_field=MONEY)),
            )
        )
    if fresh_groups is None:
        from_runs = runs.annotate(
            **{name: pair[1] for name, pair in columns.items()},
            **({"bucket": trunc("accepted_at", tzinfo=UTC)} if by_bucket else {}),
        )
        parts.append(_runs_summed(from_runs.values(*keys), saving))
    sqls: list[str] = []
    params: list[Any] = []
    for part in parts:
        sql, part_params = part.order_by().query.sql_with_params()
        sqls.append(sql)
        params.extend(part_params)
    if fresh_groups is not None:
        if by_bucket or only is not None:
            raise ValueError("the fresh runs' groups are neither by bucket nor of some values")
        named = ", ".join(columns)
        sums = ", ".join(f"SUM({name}) AS {name}" for name in SUM_NAMES)
        sqls.append(f"SELECT {named}, {sums} FROM {fresh_groups} GROUP BY {named}")
    return " UNION ALL ".join(sqls), params


SUM_NAMES = ("s_requests", "s_errors", "s_prompt", "s_completion", "s_cached", "s_cost", "s_saved")


def _runs_summed(grouped: QuerySet[Any], saving: Case | Value) -> QuerySet[Any]:
    """The runs' sums (`SUM_NAMES`, in that order) per group of `grouped`."""
    summed: QuerySet[Any] = grouped.annotate(
        s_requests=Count("pk"),
        s_errors=Count("pk", filter=IS_ERROR),
        s_prompt=Sum("prompt_tokens"),
        s_completion=Sum("completion_tokens"),
        s_cached=Sum("cached_tokens"),
        s_cost=Sum("cost"),
        s_saved=Sum(
            ExpressionWrapper(
                Coalesce(F("cached_tokens"), Value(0), output_field=IntegerField()) * saving,
                output_field=MONEY,
            )
        ),
    )
    return summed


def fresh_groups_sql(filters: SpendFilters, *, now: datetime) -> tuple[str, list[Any]]:
    """The fresh runs (those `grouped_sql` reads, not by bucket) grouped by every dimension's
    column at once (`d_organization`, `d_key`, …) with their sums: for a CTE that each
    breakdown's `grouped_sql(…, fresh_groups=…)` sums, so one query of several breakdowns
    reads those runs once."""
    runs = _fresh_runs(filters, _periods(filters, days=True, now=now))
    columns = {f"d_{dimension}": RUN_COLUMN[dimension] for dimension in DIMENSIONS}
    grouped = runs.annotate(**columns).values(*columns)
    sql, params = _runs_summed(grouped, _savings_per_token()).order_by().query.sql_with_params()
    return sql, list(params)


OUTER_SUMS = """
    COALESCE(SUM(u.s_requests), 0), COALESCE(SUM(u.s_errors), 0), COALESCE(SUM(u.s_prompt), 0),
    COALESCE(SUM(u.s_completion), 0), COALESCE(SUM(u.s_cached), 0), COALESCE(SUM(u.s_cost), 0),
    COALESCE(SUM(u.s_saved), 0)
"""


def usage_of(values: Sequence[Any]) -> Usage:
    requests, errors, prompt, completion, cached, cost, saved = values
    return Usage(
        requests=int(requests),
        errors=int(errors),
        prompt_tokens=int(prompt),
        completion_tokens=int(completion),
        cached_tokens=int(cached),
        # SQLite returns sums of decimals as floats: through str, as the `money` filter does.
        cost=summed_decimal(cost),
        savings=summed_decimal(saved) / PER_MILLION,
    )


def summed_decimal(value: Any) -> Decimal:
    if isinstance(value, Decimal):
        return value
    # A float sum (SQLite's) to the nine places money is stored with: 0.37, not
    # 0.37000000000000005.
    return Decimal(str(value)).quantize(NANO) if isinstance(value, float) else Decimal(value)
