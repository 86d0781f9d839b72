"""Spend and usage: who spends (organization, key, end user, model), over time, what caching
saved, which errors, and how long runs took.

Sums come from the same two sources as the Overview's (`dashboard/selectors/overview.py`): the
hourly rollups for the hours before the one of their last refresh, and the runs themselves from
that hour on (`fresh_since`), so the two pages agree and a run shows the moment it is stored.
The rollups are read through their slices (telemetry/services/slices.py: the same sums per
breakdown, by the hour and by the day): a range's whole days from the day slices, its other
hours from the hourly ones — or, for end users, from the rollups themselves.
The two grouped queries are put together in SQL (`UNION ALL`, then grouped again), so a
breakdown by a dimension with many values (end users) is sorted and cut in the database and
never summed in Python.

Errors by code are counted from the runs (the rollups keep no code), through the
`run_error_accepted` partial index: only the runs that are errors are in it. The latency and
TTFT histograms, like the Overview's percentiles, describe the range's latest
`PERCENTILE_SAMPLE` completed runs.

Cache savings are what cached prompt tokens would have cost at the model's input price, less
what they cost at its cached-input price, at the catalog's prices today.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    DecimalField,
    DurationField,
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
from django.utils import timezone

from billing.costs import PER_MILLION
from dashboard.selectors.catalog import key_labels, organization_names
from dashboard.selectors.overview import PERCENTILE_SAMPLE, fresh_since
from gateway.models import CatalogModel
from telemetry.models import Run, UsageRollup, UsageSlice
from telemetry.services.rollups import IS_ERROR, usage_rollups_watermark
from telemetry.services.slices import GRAINS_BY_SPAN

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
# The slice grain each breakdown (and its chart) is summed from (telemetry/services/slices.py).
GRAIN = {
    "organization": "model",
    "key": "key",
    "end_user": "end_user",
    "model": "model",
    "deployment": "deployment",
}
ZERO = timedelta(0)
NANO = Decimal("1e-9")
MEASURES = ("requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost")
TOP = 10  # rows of each table on the page (the CSV has them all)
CHART_SERIES = 5  # lines per chart: the top spenders, then the rest as one
MONEY = DecimalField(max_digits=30, decimal_places=9)
# Histogram bins, upper bounds in milliseconds; the last bin is open-ended.
BIN_EDGES_MS = (50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000)


@dataclass(frozen=True)
class SpendFilters:
    since: datetime
    until: datetime
    organization_id: int | None = None
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


@dataclass
class Chart:
    """Spend per bucket: one series per top value, then "other" (the rest) when there is any."""

    buckets: list[int] = field(default_factory=list)  # Unix seconds
    series: list[tuple[str, list[float]]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"x": self.buckets, "series": [[label, v] for label, v in self.series]}


@dataclass(frozen=True)
class ErrorCount:
    code: str
    errors: int


@dataclass(frozen=True)
class Bin:
    label: str
    upper_ms: int | None  # None: the open-ended last bin
    runs: int


# -- sums from the rollups and the runs --------------------------------------------------------


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
    """Where the summed rows of a range come from: its whole days from the day slices, its
    other hours from hourly rows (slices or rollups), and the runs from `fresh` on."""

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
        if grain in GRAINS_BY_SPAN[UsageSlice.Span.HOUR]:
            hourly: QuerySet[Any] = UsageSlice.objects.filter(
                _within(periods.hours, "start"), span=UsageSlice.Span.HOUR, grain=grain
            )
            time_column = "start"
        else:  # end users by the hour: the rollups themselves (a slice would be as large)
            hourly = UsageRollup.objects.filter(_within(periods.hours, "hour"))
            time_column = "hour"
        if org is not None:
            hourly = hourly.filter(organization_id=org)
        sources.append((hourly, time_column))
    if periods.days:
        first, last = periods.days
        day_grain = "end_user_all" if grain == "end_user" and org is None else grain
        daily = UsageSlice.objects.filter(
            span=UsageSlice.Span.DAY, grain=day_grain, start__gte=first, start__lt=last
        )
        if org is not None:
            daily = daily.filter(organization_id=org)
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
    if filters.organization_id is not None:
        runs = runs.filter(organization_id=filters.organization_id)
    return runs


# Columns to group by: a name, and its expression over the summed rows and over the runs.
Columns = dict[str, tuple[Expression | F, Expression | F]]


def _by(dimension: str) -> Columns:
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


def _grouped_sql(
    filters: SpendFilters,
    columns: Columns,
    *,
    grain: str,
    by_bucket: bool,
    now: datetime,
    only: Only | None = None,
    day_slices: bool = True,
) -> tuple[str, list[Any]]:
    """The summed rows and the fresh runs grouped alike (the same columns in the same order),
    as one `UNION ALL`; with `only`, the rows of those values only."""
    # A day slice cannot be cut in hours.
    days = (filters.bucket == "day" or not by_bucket) and day_slices
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
    parts = []
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
    from_runs = runs.annotate(
        **{name: pair[1] for name, pair in columns.items()},
        **({"bucket": trunc("accepted_at", tzinfo=UTC)} if by_bucket else {}),
    )
    parts.append(
        from_runs.values(*keys).annotate(
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
    )
    sqls, params = [], []
    for part in parts:
        sql, part_params = part.order_by().query.sql_with_params()
        sqls.append(sql)
        params.extend(part_params)
    return " UNION ALL ".join(sqls), params


OUTER_SUMS = """
    COALESCE(SUM(u.s_requests), 0), COALESCE(SUM(u.s_errors), 0), COALESCE(SUM(u.s_prompt), 0),
    COALESCE(SUM(u.s_completion), 0), COALESCE(SUM(u.s_cached), 0), COALESCE(SUM(u.s_cost), 0),
    COALESCE(SUM(u.s_saved), 0)
"""


def _usage_of(values: Sequence[Any]) -> Usage:
    requests, errors, prompt, completion, cached, cost, saved = values
    return Usage(
        requests=int(requests),
        errors=int(errors),
        prompt_tokens=int(prompt),
        completion_tokens=int(completion),
        cached_tokens=int(cached),
        # SQLite returns sums of decimals as floats: through str, as the `money` filter does.
        cost=_decimal(cost),
        savings=_decimal(saved) / PER_MILLION,
    )


def _decimal(value: Any) -> Decimal:
    if isinstance(value, Decimal):
        return value
    # A float sum (SQLite's) to the nine places money is stored with: 0.37, not
    # 0.37000000000000005.
    return Decimal(str(value)).quantize(NANO) if isinstance(value, float) else Decimal(value)


def spend_totals(filters: SpendFilters, *, now: datetime | None = None) -> Usage:
    """The range's sums: requests, errors, tokens, cost and cache savings."""
    union, params = _grouped_sql(
        filters, {}, grain="model", by_bucket=False, now=now or timezone.now()
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {OUTER_SUMS} FROM ({union}) AS u", params)
        return _usage_of(cursor.fetchone())


def usage_by(
    filters: SpendFilters,
    dimension: str,
    *,
    limit: int | None = TOP,
    sort: str = "cost",
    now: datetime | None = None,
) -> list[Usage]:
    """The range's sums per value of `dimension`, the largest `sort` first (ties by value)."""
    if dimension not in DIMENSIONS or sort not in ("cost", "errors", "requests"):
        raise ValueError(f"no breakdown {dimension!r} by {sort!r}")
    now = now or timezone.now()
    union, params = _grouped_sql(
        filters, _by(dimension), grain=GRAIN[dimension], by_bucket=False, now=now
    )
    order = {"requests": 2, "errors": 3, "cost": 7}[sort]  # positions in the SELECT
    sql = f"""
        SELECT u.d_{dimension}, {OUTER_SUMS} FROM ({union}) AS u
        GROUP BY u.d_{dimension} ORDER BY {order} DESC, 1 ASC
    """
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = [(value, _usage_of(sums)) for value, *sums in cursor.fetchall()]
    if dimension == "end_user" and rows:
        saved = _end_user_savings(filters, [value for value, _ in rows], now=now)
        for value, usage in rows:
            usage.savings = saved.get(value, Decimal(0))
    labels = _labels(dimension, [value for value, _ in rows])
    found = []
    for value, usage in rows:
        usage.value, usage.label = value, labels(value)
        found.append(usage)
    return found


def _end_user_savings(
    filters: SpendFilters, end_users: list[str], *, now: datetime
) -> dict[str, Decimal]:
    """What caching saved each of `end_users`, from the rollups: their slices keep no model to
    price cached tokens by (an index scan on `rollup_end_user_hour`)."""
    union, params = _grouped_sql(
        filters,
        _by("end_user"),
        grain="end_user",
        by_bucket=False,
        now=now,
        only=("end_user", end_users),
        day_slices=False,
    )
    sql = f"SELECT u.d_end_user, COALESCE(SUM(u.s_saved), 0) FROM ({union}) AS u GROUP BY 1"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {value: _decimal(saved) / PER_MILLION for value, saved in cursor.fetchall()}


def _labels(dimension: str, values: list[Any]) -> Any:
    """How a value of the dimension reads: names for organizations and keys."""
    if dimension == "organization":
        names = organization_names({int(v) for v in values})
        return lambda v: names.get(int(v), f"#{v}")
    if dimension == "key":
        keys = key_labels({int(v) for v in values if v})
        return lambda v: keys.get(int(v), "(no key)")
    return lambda v: v or "(none)"


def spend_chart(
    filters: SpendFilters,
    dimension: str,
    top: list[Usage],
    *,
    now: datetime | None = None,
) -> Chart:
    """Cost per bucket of each of `top` (values of `dimension`), and of everything else."""
    return spend_charts(filters, {dimension: top}, now=now)[dimension]


def spend_charts(
    filters: SpendFilters, tops: dict[str, list[Usage]], *, now: datetime | None = None
) -> dict[str, Chart]:
    """`spend_chart` of each dimension of `tops` (its top values), the range's total per bucket
    read once for all."""
    now = now or timezone.now()
    buckets = _buckets(filters)
    index = {moment: i for i, moment in enumerate(buckets)}
    total = [Decimal(0)] * len(buckets)
    for bucket, _, cost in _costs_per_bucket(filters, None, only=None, now=now):
        at = index.get(_moment(bucket))
        if at is not None:
            total[at] += cost
    charts: dict[str, Chart] = {}
    for dimension, top in tops.items():
        shown = top[:CHART_SERIES]
        place = {usage.value: i for i, usage in enumerate(shown)}
        # The shown values' own rows (through indexes); "other" is the total less them, so no
        # query reads every value's rows (5,000 end users a day for a month).
        costs = [[Decimal(0)] * len(buckets) for _ in shown]
        if shown:
            only = (dimension, list(place))
            for bucket, value, cost in _costs_per_bucket(filters, dimension, only=only, now=now):
                at = index.get(_moment(bucket))
                if at is not None and value in place:
                    costs[place[value]][at] += cost
        other = [float(t - sum(line[at] for line in costs)) for at, t in enumerate(total)]
        series = [(usage.label, [float(c) for c in costs[i]]) for i, usage in enumerate(shown)]
        if any(other):
            series.append(("other", other))
        charts[dimension] = Chart(
            buckets=[int(moment.timestamp()) for moment in buckets], series=series
        )
    return charts


def _costs_per_bucket(
    filters: SpendFilters, dimension: str | None, *, only: Only | None, now: datetime
) -> list[tuple[Any, Any, Decimal]]:
    """Cost per bucket and value of `dimension` (or in all, without one)."""
    columns = _by(dimension) if dimension else {}
    grain = GRAIN[dimension] if dimension else "model"
    union, params = _grouped_sql(filters, columns, grain=grain, by_bucket=True, now=now, only=only)
    name = f"d_{dimension}" if dimension else "d_all"
    sql = f"SELECT u.bucket, u.{name}, COALESCE(SUM(u.s_cost), 0) FROM ({union}) AS u GROUP BY 1, 2"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(bucket, value, _decimal(cost)) for bucket, value, cost in cursor.fetchall()]


def _buckets(filters: SpendFilters) -> list[datetime]:
    step = timedelta(days=1) if filters.bucket == "day" else timedelta(hours=1)
    moment = filters.since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if filters.bucket == "day":
        moment = moment.replace(hour=0)
    found = []
    while moment < filters.until:
        found.append(moment)
        moment += step
    return found


def _moment(value: datetime | str) -> datetime:
    """A bucket as the database returned it from raw SQL: Postgres a naive UTC timestamp
    (`date_trunc` of the time `AT TIME ZONE 'UTC'`), SQLite a string."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# -- from the runs: error codes and the histograms ------------------------------------------


def errors_by_code(filters: SpendFilters) -> list[ErrorCount]:
    """Error runs of the range per error code, the most frequent first (from the start of its
    first hour, as the sums count)."""
    start = filters.since.replace(minute=0, second=0, microsecond=0)
    runs = Run.objects.filter(IS_ERROR, accepted_at__gte=start, accepted_at__lt=filters.until)
    if filters.organization_id is not None:
        runs = runs.filter(organization_id=filters.organization_id)
    rows = runs.values("error_code").annotate(errors=Count("pk")).order_by("-errors", "error_code")
    return [ErrorCount(row["error_code"] or "(none)", row["errors"]) for row in rows]


def histogram(filters: SpendFilters, measure: str, *, limit: int = PERCENTILE_SAMPLE) -> list[Bin]:
    """How many of the range's latest `limit` completed runs fall in each bin of latency
    (`latency`: accepted to finished) or time to first token (`ttft`)."""
    end = {"latency": "finished_at", "ttft": "first_token_at"}[measure]
    sample = Run.objects.filter(
        accepted_at__gte=filters.since,
        accepted_at__lt=filters.until,
        status=Run.Status.COMPLETED,
        **{f"{end}__isnull": False},
    )
    if filters.organization_id is not None:
        sample = sample.filter(organization_id=filters.organization_id)
    duration = ExpressionWrapper(F(end) - F("accepted_at"), output_field=DurationField())
    which = Case(
        *(
            When(duration__lt=timedelta(milliseconds=edge), then=Value(i))
            for i, edge in enumerate(BIN_EDGES_MS)
        ),
        default=Value(len(BIN_EDGES_MS)),
        output_field=IntegerField(),
    )
    # Each run's bin in the sample's own query (an index scan, newest first, cut at `limit`),
    # counted around it: `pk IN (sample)` made Postgres join the sample back to the table.
    latest = (
        sample.annotate(duration=duration, bin=which).order_by("-accepted_at").values("bin")[:limit]
    )
    inner, params = latest.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT s.bin, COUNT(*) FROM ({inner}) AS s GROUP BY s.bin", params)
        counts = dict(cursor.fetchall())
    bins = []
    lower = 0
    for i, edge in enumerate((*BIN_EDGES_MS, None)):
        label = (
            f"{_ms_label(lower)}\N{EN DASH}{_ms_label(edge)}"
            if edge
            else f"\N{GREATER-THAN OR EQUAL TO} {_ms_label(lower)}"
        )
        bins.append(Bin(label=label, upper_ms=edge, runs=counts.get(i, 0)))
        lower = edge or lower
    return bins


def _ms_label(ms: int) -> str:
    return f"{ms // 1000} s" if ms >= 1000 else f"{ms} ms"
