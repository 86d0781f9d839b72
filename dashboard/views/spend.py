"""Spend and usage: breakdowns by organization, key, end user, model and deployment, spend over
time, errors, latency and TTFT histograms, each table also as CSV."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from core.db_routing import reads_from_replica
from dashboard import services
from dashboard.csv_export import csv_response
from dashboard.forms import SpendForm
from dashboard.selectors.catalog import organization_choices
from dashboard.selectors.spend import (
    SpendFilters,
    errors_by_code,
    histogram,
    spend_totals_and_charts,
    usage_by,
    usage_by_each,
)
from dashboard.views import access, member_required

# The breakdowns drawn as spend over time, in the page's order.
CHARTED = (
    ("organization", "Organization"),
    ("key", "Key"),
    ("end_user", "End user"),
    ("model", "Model"),
)
USAGE_HEADER = [
    "requests",
    "errors",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cache_hit_ratio",
    "cost",
    "cache_savings",
]


@member_required
@require_GET
@reads_from_replica
def spend(request: HttpRequest) -> HttpResponse:
    seen = access(request).organizations
    form = SpendForm(request.GET, organizations=organization_choices(seen))
    services.usage_rollups_refresh_without_beat()
    now = timezone.now()
    filters = replace(form.filters(now=now), organizations=seen)
    if request.GET.get("format") == "csv" and form.csv_table():
        return _csv(filters, form.csv_table(), now=now)
    # Deployments by their errors; all five in one query (the recent runs read once).
    sorts = {**{d: "cost" for d, _ in CHARTED}, "deployment": "errors"}
    breakdowns = usage_by_each(filters, sorts, now=now)
    charted = {d: breakdowns[d] for d, _ in CHARTED}
    totals, by_time = spend_totals_and_charts(filters, charted, now=now)
    charts = {d: c.as_json() for d, c in by_time.items()}
    latency, ttft = histogram(filters, "latency"), histogram(filters, "ttft")
    charts["latency"] = {"bins": [b.label for b in latency], "runs": [b.runs for b in latency]}
    charts["ttft"] = {"bins": [b.label for b in ttft], "runs": [b.runs for b in ttft]}
    params = request.GET.copy()
    params.pop("format", None)
    params.pop("table", None)
    return render(
        request,
        "dashboard/spend.html",
        {
            "form": form,
            "filters": filters,
            "totals": totals,
            "breakdowns": [(d, label, breakdowns[d]) for d, label in CHARTED],
            "deployments": breakdowns["deployment"],
            "error_codes": errors_by_code(filters),
            "latency": latency,
            "ttft": ttft,
            "charts": charts,
            "params": params.urlencode(),
        },
    )


def _csv(filters: SpendFilters, table: str, *, now: datetime) -> HttpResponse:
    day = f"{filters.since:%Y%m%dT%H%M}-{filters.until:%Y%m%dT%H%M}"
    return csv_response(_csv_rows(filters, table, now=now), f"mortar-spend-{table}-{day}.csv")


def _csv_rows(filters: SpendFilters, table: str, *, now: datetime) -> Iterator[list[object]]:
    """The table's every row (the page shows the first few), exact figures."""
    if table == "errors":
        yield ["error_code", "errors"]
        for error in errors_by_code(filters):
            yield [error.code, error.errors]
    elif table in ("latency", "ttft"):
        yield ["bin", "upper_ms", "runs"]
        for b in histogram(filters, table):
            yield [b.label, "" if b.upper_ms is None else b.upper_ms, b.runs]
    else:
        sort = "errors" if table == "deployment" else "cost"
        yield [table, *USAGE_HEADER]
        for row in usage_by(filters, table, limit=None, sort=sort, now=now):
            ratio = row.cache_hit_ratio
            yield [
                # Names for organizations and keys; end users, models and deployments as
                # stored (an empty one stays empty, not "(none)").
                row.label if table in ("organization", "key") else row.value,
                row.requests,
                row.errors,
                row.prompt_tokens,
                row.completion_tokens,
                row.cached_tokens,
                "" if ratio is None else f"{ratio:.4f}",
                row.cost,
                row.savings,
            ]
