"""The Spend page's errors and latency, read from the runs themselves: error runs by code, and
the latency and time-to-first-token histograms of the range's latest completed runs
(`PERCENTILE_SAMPLE`, as the Overview's percentiles)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import connection
from django.db.models import (
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    Value,
    When,
)

from dashboard.selectors.overview import PERCENTILE_SAMPLE
from dashboard.selectors.scope import of_organizations
from dashboard.selectors.spend.sums import SpendFilters
from telemetry.models import Run
from telemetry.services.rollups import IS_ERROR

# Histogram bins, upper bounds in milliseconds; the last bin is open-ended.
BIN_EDGES_MS = (50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000)


@dataclass(frozen=True)
class ErrorCount:
    code: str
    errors: int


@dataclass(frozen=True)
class Bin:
    label: str
    upper_ms: int | None  # None: the open-ended last bin
    runs: int


def errors_by_code(filters: SpendFilters) -> list[ErrorCount]:
    """Error runs of the range per error code, the most frequent first (from the start of its
    first hour, as the sums count)."""
    start = filters.since.replace(minute=0, second=0, microsecond=0)
    runs = Run.objects.filter(IS_ERROR, accepted_at__gte=start, accepted_at__lt=filters.until)
    runs = of_organizations(runs, filters.organization_id, filters.organizations)
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
    sample = of_organizations(sample, filters.organization_id, filters.organizations)
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
