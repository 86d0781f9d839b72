"""Spend over time: cost per hour or day of a breakdown's top values, and of the rest; and the
range's sums read with them (`spend_totals_and_charts`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.utils import timezone

from dashboard.selectors.spend.sums import (
    GRAIN,
    OUTER_SUMS,
    Only,
    SpendFilters,
    Usage,
    grouped_by,
    grouped_sql,
    summed_decimal,
    usage_of,
)

CHART_SERIES = 5  # lines per chart: the top spenders, then the rest as one


@dataclass
class Chart:
    """Spend per bucket: one series per top value, then "other" (the rest) when there is any."""

    buckets: list[int] = field(default_factory=list)  # Unix seconds
    series: list[tuple[str, list[float]]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"x": self.buckets, "series": [[label, v] for label, v in self.series]}


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
    return spend_totals_and_charts(filters, tops, now=now)[1]


def spend_totals_and_charts(
    filters: SpendFilters, tops: dict[str, list[Usage]], *, now: datetime | None = None
) -> tuple[Usage, dict[str, Chart]]:
    """The range's sums (`spend_totals`) and `spend_charts`, from one query of the sums per
    bucket and model: the total per bucket, the model chart's lines and the range's sums are
    all sums of its rows, so the runs since the rollups' last refresh (every run of those hours,
    at a high rate most of the page's time) are read once for the three, not three times."""
    now = now or timezone.now()
    buckets = _buckets(filters)
    index = {moment: i for i, moment in enumerate(buckets)}
    total = [Decimal(0)] * len(buckets)
    totals = Usage()
    per_model: list[tuple[Any, Any, Decimal]] = []
    for bucket, model, usage in _sums_per_bucket_and_model(filters, now=now):
        _add(totals, usage)
        per_model.append((bucket, model, usage.cost))
        at = index.get(_moment(bucket))
        if at is not None:
            total[at] += usage.cost
    charts: dict[str, Chart] = {}
    for dimension, top in tops.items():
        shown = top[:CHART_SERIES]
        place = {usage.value: i for i, usage in enumerate(shown)}
        # The shown values' own rows (through indexes); "other" is the total less them, so no
        # query reads every value's rows (5,000 end users a day for a month).
        costs = [[Decimal(0)] * len(buckets) for _ in shown]
        if shown:
            only = (dimension, list(place))
            rows = (
                per_model
                if dimension == "model"
                else _costs_per_bucket(filters, dimension, only=only, now=now)
            )
            for bucket, value, cost in rows:
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
    return totals, charts


def _sums_per_bucket_and_model(
    filters: SpendFilters, *, now: datetime
) -> list[tuple[Any, Any, Usage]]:
    union, params = grouped_sql(
        filters, grouped_by("model"), grain="model", by_bucket=True, now=now
    )
    sql = f"SELECT u.bucket, u.d_model, {OUTER_SUMS} FROM ({union}) AS u GROUP BY 1, 2"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(bucket, model, usage_of(sums)) for bucket, model, *sums in cursor.fetchall()]


def _add(into: Usage, usage: Usage) -> None:
    into.requests += usage.requests
    into.errors += usage.errors
    into.prompt_tokens += usage.prompt_tokens
    into.completion_tokens += usage.completion_tokens
    into.cached_tokens += usage.cached_tokens
    into.cost += usage.cost
    into.savings += usage.savings


def _costs_per_bucket(
    filters: SpendFilters, dimension: str, *, only: Only, now: datetime
) -> list[tuple[Any, Any, Decimal]]:
    """Cost per bucket of `only`'s values of `dimension`."""
    union, params = grouped_sql(
        filters, grouped_by(dimension), grain=GRAIN[dimension], by_bucket=True, now=now, only=only
    )
    sql = (
        f"SELECT u.bucket, u.d_{dimension}, COALESCE(SUM(u.s_cost), 0) FROM ({union}) AS u"
        " GROUP BY 1, 2"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(bucket, value, summed_decimal(cost)) for bucket, value, cost in cursor.fetchall()]


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
