"""Spend over time: cost per hour or day of a breakdown's top values, and of the rest."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.utils import timezone

from dashboard.selectors.spend.sums import (
    GRAIN,
    Only,
    SpendFilters,
    Usage,
    grouped_by,
    grouped_sql,
    summed_decimal,
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
    columns = grouped_by(dimension) if dimension else {}
    grain = GRAIN[dimension] if dimension else "model"
    union, params = grouped_sql(filters, columns, grain=grain, by_bucket=True, now=now, only=only)
    name = f"d_{dimension}" if dimension else "d_all"
    sql = f"SELECT u.bucket, u.{name}, COALESCE(SUM(u.s_cost), 0) FROM ({union}) AS u GROUP BY 1, 2"
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
