"""The Overview: requests, tokens, cost and errors over time."""

from __future__ import annotations

from dataclasses import replace

from django.http import (
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard import services
from dashboard.forms import OverviewForm
from dashboard.selectors.catalog import (
    deployment_names,
    model_names,
    organization_choices,
)
from dashboard.selectors.overview import overview as overview_of
from dashboard.views import access, member_required


@member_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    seen = access(request).organizations
    form = OverviewForm(
        request.GET,
        organizations=organization_choices(seen),
        models=model_names(),
        deployments=deployment_names(),
    )
    services.usage_rollups_refresh_without_beat()
    filters = replace(form.filters(now=timezone.now()), organizations=seen)
    figures = overview_of(filters)
    charts = {"hours": figures.hours, "series": figures.series}
    return render(
        request,
        "dashboard/overview.html",
        {"form": form, "filters": filters, "figures": figures, "charts": charts},
    )
