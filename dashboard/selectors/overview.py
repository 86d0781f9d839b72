"""The overview: usage per hour, and latency percentiles from a bounded run sample.

Requests, errors, tokens, cache hits and cost are sums, read from `UsageRollup` (hourly,
recomputed by Celery beat every five minutes, by `manage.py rollupusage`, or in-process on the
embedded default: `usage_rollups_keep_fresh`) for the hours before the one of the rollups' last
refresh (their watermark), and summed from the runs from that hour on — so the page is right the
moment a run is stored, with or without beat, and a long range never scans runs. Whole hours
on each side, so no run is counted twice (a refresh takes seconds: runs accepted meanwhile may
or may not be in its rows). Without a watermark of the last `FRESH_HOURS` (beat never ran, or
stopped), the current hour and the one before — the hours beat's refresh looks back on — are
summed from runs. Both count alike: a run counts once it has an outcome, in the hour it was
accepted (telemetry/services/rollups.py); one of the hour before the watermark's that was still
streaming at the refresh is counted at the next.

Percentiles cannot be summed, so p50 / p95 latency and time to first token are computed from
runs: the latest `PERCENTILE_SAMPLE` completed runs of the range (an index scan on
`accepted_at`, newest first), with Postgres' `percentile_cont` per hour and overall. When a
range holds more completed runs than that, the percentiles describe its most recent part; the
page says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Count, DurationField, ExpressionWrapper, F, QuerySet, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from dashboard.selectors.scope import of_organizations
from telemetry.models import Run, UsageRollup
from telemetry.services.rollups import IS_ERROR, usage_rollups_watermark

M = TypeVar("M", Run, UsageRollup)

PERCENTILE_SAMPLE = 50_000
ONE_HOUR = timedelta(hours=1)
# Without a recent watermark, the hours summed from runs rather than read from rollups: those
# beat's refresh (`hours: 2`, every five minutes) may not have recomputed yet.
FRESH_HOURS = 2
MEASURES = ("requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost")


@dataclass(frozen=True)
class OverviewFilters:
    since: datetime
    until: datetime
    organization_id: int | None = None
    organizations: frozenset[int] | None = None  # those the user sees; None: every one
    model: str = ""
    deployment: str = ""


@dataclass(frozen=True)
class Percentiles:
    latency_p50: float | None = None
    latency_p95: float | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None


@dataclass
class Overview:
    totals: dict[str, Any]
    percentiles: Percentiles
    sampled_runs: int
    sample_limit: int
    # Chart data: `hours` as Unix seconds, each series one value per hour (None = no data).
    hours: list[int] = field(default_factory=list)
    series: dict[str, list[float | None]] = field(default_factory=dict)


def _floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


# Per hour: requests, errors, prompt / completion / cached tokens and cost.
HourlySums = dict[datetime, dict[str, Any]]


def fresh_since(now: datetime, watermark: datetime | None) -> datetime:
    """Where the sums from runs start: the hour of the rollups' last refresh when it is
    recent, else the start of the previous hour."""
    earliest = _floor_hour(now) - (FRESH_HOURS - 1) * ONE_HOUR
    if watermark is not None and earliest <= watermark <= now:
        return _floor_hour(watermark)
    return earliest


def _rollups(filters: OverviewFilters, *, before: datetime) -> QuerySet[UsageRollup]:
    rows = UsageRollup.objects.filter(
        hour__gte=_floor_hour(filters.since), hour__lt=min(filters.until, before)
    )
    return _narrowed(rows, filters)


def _narrowed(rows: QuerySet[M], filters: OverviewFilters) -> QuerySet[M]:
    """`rows` (rollups or runs: both have these fields) of the filters' organization, model
    and deployment."""
    rows = of_organizations(rows, filters.organization_id, filters.organizations)
    if filters.model:
        rows = rows.filter(model=filters.model)
    if filters.deployment:
        rows = rows.filter(deployment=filters.deployment)
    return rows


def _hours_from_rollups(filters: OverviewFilters, *, before: datetime) -> HourlySums:
    rows = _rollups(filters, before=before).values("hour")
    sums = rows.annotate(**{m: Sum(m) for m in MEASURES}).order_by()
    return {row["hour"]: dict(row) for row in sums}


def _hours_from_runs(filters: OverviewFilters, *, since: datetime) -> HourlySums:
    """The rollups' sums, taken from the runs of the hours from `since` on."""
    runs = Run.objects.filter(
        accepted_at__gte=max(_floor_hour(filters.since), since), accepted_at__lt=filters.until
    ).exclude(status=Run.Status.IN_PROGRESS)
    runs = _narrowed(runs, filters)
    rows = (
        runs.annotate(hour=TruncHour("accepted_at", tzinfo=UTC))
        .values("hour")
        .annotate(
            requests=Count("pk"),
            errors=Count("pk", filter=IS_ERROR),
            prompt_tokens_sum=Sum("prompt_tokens"),
            completion_tokens_sum=Sum("completion_tokens"),
            cached_tokens_sum=Sum("cached_tokens"),
            cost_sum=Sum("cost"),
        )
        .order_by()
    )
    return {
        row["hour"]: {
            "requests": row["requests"],
            "errors": row["errors"],
            "prompt_tokens": row["prompt_tokens_sum"] or 0,
            "completion_tokens": row["completion_tokens_sum"] or 0,
            "cached_tokens": row["cached_tokens_sum"] or 0,
            "cost": row["cost_sum"] or Decimal(0),
        }
        for row in rows
    }


def _sample(filters: OverviewFilters) -> QuerySet[Run]:
    runs = Run.objects.filter(
        accepted_at__gte=filters.since,
        accepted_at__lt=filters.until,
        status=Run.Status.COMPLETED,
        finished_at__isnull=False,
    )
    runs = of_organizations(runs, filters.organization_id, filters.organizations)
    if filters.model:
        runs = runs.filter(model=filters.model)
    if filters.deployment:
        runs = runs.filter(deployment=filters.deployment)
    return runs.order_by("-accepted_at")


def ratio(part: int | float | Decimal, whole: int | float | Decimal) -> float | None:
    return float(part) / float(whole) if whole else None


def overview(filters: OverviewFilters, *, now: datetime | None = None) -> Overview:
    """Totals, hourly series and latency percentiles for the range and filters."""
    recent = fresh_since(now or timezone.now(), usage_rollups_watermark())
    per_hour = _hours_from_rollups(filters, before=recent)
    per_hour.update(_hours_from_runs(filters, since=recent))
    totals: dict[str, Any] = {
        name: sum((row[name] or 0 for row in per_hour.values()), start=0) for name in MEASURES
    }
    totals["cost"] = Decimal(totals["cost"])
    totals["cache_hit_ratio"] = ratio(totals["cached_tokens"], totals["prompt_tokens"])
    totals["error_ratio"] = ratio(totals["errors"], totals["requests"])

    overall, hourly, sampled = run_percentiles(filters)

    hours: list[datetime] = []
    moment = _floor_hour(filters.since)
    while moment < filters.until:
        hours.append(moment)
        moment += ONE_HOUR
    series: dict[str, list[float | None]] = {
        name: []
        for name in (
            *MEASURES,
            "cache_hit_ratio",
            "latency_p50",
            "latency_p95",
            "ttft_p50",
            "ttft_p95",
        )
    }
    for hour in hours:
        row = per_hour.get(hour)
        for name in MEASURES:
            series[name].append(float(row[name]) if row else 0)
        series["cache_hit_ratio"].append(
            ratio(row["cached_tokens"], row["prompt_tokens"]) if row else None
        )
        point = hourly.get(hour, Percentiles())
        series["latency_p50"].append(point.latency_p50)
        series["latency_p95"].append(point.latency_p95)
        series["ttft_p50"].append(point.ttft_p50)
        series["ttft_p95"].append(point.ttft_p95)
    return Overview(
        totals=totals,
        percentiles=overall,
        sampled_runs=sampled,
        sample_limit=PERCENTILE_SAMPLE,
        hours=[int(hour.timestamp()) for hour in hours],
        series=series,
    )


def run_percentiles(
    filters: OverviewFilters, *, limit: int = PERCENTILE_SAMPLE
) -> tuple[Percentiles, dict[datetime, Percentiles], int]:
    """p50 / p95 of latency and TTFT (ms) over the range's latest `limit` completed runs:
    overall, per hour, and how many runs the sample held."""
    sample = (
        _sample(filters)
        .annotate(
            latency=ExpressionWrapper(F("finished_at") - F("accepted_at"), DurationField()),
            ttft=ExpressionWrapper(F("first_token_at") - F("accepted_at"), DurationField()),
        )
        .values("accepted_at", "latency", "ttft")[:limit]
    )
    if connection.vendor == "postgresql":
        return _percentiles_in_postgres(sample)
    return _percentiles_in_python(sample)


def _percentiles_in_postgres(
    sample: QuerySet[Run, Any],
) -> tuple[Percentiles, dict[datetime, Percentiles], int]:
    inner, params = sample.query.sql_with_params()
    sql = f"""
        SELECT date_trunc('hour', s.accepted_at) AS hour,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.latency)),
               percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM s.latency)),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.ttft)),
               percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM s.ttft)),
               count(*),
               GROUPING(date_trunc('hour', s.accepted_at))
        FROM ({inner}) AS s
        GROUP BY GROUPING SETS ((date_trunc('hour', s.accepted_at)), ())
    """
    overall, hourly, sampled = Percentiles(), {}, 0
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for hour, l50, l95, t50, t95, count, is_total in cursor.fetchall():
            point = Percentiles(*(_ms(value) for value in (l50, l95, t50, t95)))
            if is_total:
                overall, sampled = point, count
            else:
                hourly[hour] = point
    return overall, hourly, sampled


def _percentiles_in_python(
    sample: QuerySet[Run, Any],
) -> tuple[Percentiles, dict[datetime, Percentiles], int]:
    """The same figures for the embedded SQLite default, which has no percentile_cont."""
    rows = list(sample)
    groups: dict[datetime, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_floor_hour(row["accepted_at"]), []).append(row)

    def point(of: list[dict[str, Any]]) -> Percentiles:
        latency = sorted(r["latency"].total_seconds() for r in of if r["latency"] is not None)
        ttft = sorted(r["ttft"].total_seconds() for r in of if r["ttft"] is not None)
        return Percentiles(
            _ms(percentile_cont(latency, 0.5)),
            _ms(percentile_cont(latency, 0.95)),
            _ms(percentile_cont(ttft, 0.5)),
            _ms(percentile_cont(ttft, 0.95)),
        )

    return point(rows), {hour: point(of) for hour, of in groups.items()}, len(rows)


def percentile_cont(ordered: list[float], fraction: float) -> float | None:
    """Postgres' percentile_cont: linear interpolation between the closest ranks."""
    if not ordered:
        return None
    position = fraction * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _ms(seconds: float | Decimal | None) -> float | None:
    return None if seconds is None else round(float(seconds) * 1000, 1)
