"""The cost and cache audit."""

from __future__ import annotations

from dataclasses import replace

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
)
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from core.db_routing import reads_from_replica
from dashboard import services
from dashboard.csv_export import csv_response
from dashboard.forms import AuditForm
from dashboard.selectors.audit import DEFAULT_GROUP, audit_csv_rows, audit_page, audit_totals
from dashboard.selectors.catalog import (
    organization_choices,
)
from dashboard.views import access, member_required

AUDIT_MEASURE_LABELS = [
    ("requests", "Requests"),
    ("prompt_tokens", "Prompt tokens"),
    ("completion_tokens", "Completion tokens"),
    ("cached_tokens", "Cached tokens"),
    ("cache_hit_ratio", "Hit ratio"),
    ("cost", "Cost"),
]


@member_required
@require_GET
@reads_from_replica
def audit(request: HttpRequest) -> HttpResponse:
    data = request.GET.copy()
    if "group" not in data:
        data.setlist("group", list(DEFAULT_GROUP))
    seen = access(request).organizations
    form = AuditForm(data, organizations=organization_choices(seen))
    services.usage_rollups_refresh_without_beat()
    query = replace(form.query(today=timezone.now().date()), organizations=seen)
    if request.GET.get("format") == "csv":
        if not form.is_valid():  # a download has no page to say it on
            return HttpResponseBadRequest(
                "Some filters were not understood:\n" + form.errors.as_text(),
                content_type="text/plain; charset=utf-8",
            )
        return csv_response(audit_csv_rows(query), f"mortar-audit-{query.since}-{query.until}.csv")
    # Sorting starts again at page 1; paging keeps the sort.
    params = data.copy()
    for name in ("sort", "format", "page"):
        params.pop(name, None)
    page_params = data.copy()
    for name in ("format", "page"):
        page_params.pop(name, None)
    page = audit_page(query, number=form.page_number())
    return render(
        request,
        "dashboard/audit.html",
        {
            "form": form,
            "query": query,
            "page": page,
            "rows": page.rows,
            "totals": audit_totals(query),
            "params": params.urlencode(),
            "page_params": page_params.urlencode(),
            "csv_query": page_params.urlencode(),
            "measures": AUDIT_MEASURE_LABELS,
        },
    )
