"""The cost and cache audit."""

from __future__ import annotations

from django.http import (
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard import services
from dashboard.csv_export import csv_response
from dashboard.forms import AuditForm
from dashboard.selectors.audit import AUDIT_DIMENSIONS, audit_csv_rows, audit_rows, audit_totals
from dashboard.selectors.catalog import (
    organization_choices,
)
from dashboard.views import staff_required

AUDIT_MEASURE_LABELS = [
    ("requests", "Requests"),
    ("prompt_tokens", "Prompt tokens"),
    ("completion_tokens", "Completion tokens"),
    ("cached_tokens", "Cached tokens"),
    ("cache_hit_ratio", "Hit ratio"),
    ("cost", "Cost"),
]


@staff_required
@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    data = request.GET.copy()
    if "group" not in data:
        data.setlist("group", list(AUDIT_DIMENSIONS))
    form = AuditForm(data, organizations=organization_choices())
    services.usage_rollups_refresh_without_beat()
    query = form.query(today=timezone.now().date())
    if request.GET.get("format") == "csv":
        return csv_response(audit_csv_rows(query), f"mortar-audit-{query.since}-{query.until}.csv")
    params = data.copy()
    params.pop("sort", None)
    params.pop("format", None)
    return render(
        request,
        "dashboard/audit.html",
        {
            "form": form,
            "query": query,
            "rows": audit_rows(query),
            "totals": audit_totals(query),
            "params": params.urlencode(),
            "csv_query": data.urlencode(),
            "measures": AUDIT_MEASURE_LABELS,
        },
    )
