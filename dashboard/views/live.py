"""Live: what is happening now — rates, generations in flight with their Stop button, and
one line per request, filterable and pausable. The figures are computed in the browser from the
telemetry events the page already receives: nothing is added to a request's work."""

from __future__ import annotations

from django.http import (
    HttpRequest,
    HttpResponse,
    JsonResponse,
)
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard import services
from dashboard.selectors.catalog import key_choices, model_names, organization_choices
from dashboard.selectors.live import generations_in_flight
from dashboard.views import access, admin_required, member_required


@member_required
@require_GET
def live(request: HttpRequest) -> HttpResponse:
    now, seen = timezone.now(), access(request).organizations
    in_flight = generations_in_flight(now=now, organizations=seen)
    return render(
        request,
        "dashboard/live.html",
        {
            "in_flight": [run.as_json(now=now) for run in in_flight],
            "organizations": dict(organization_choices(seen)),
            "keys": dict(key_choices(seen)),
            "models": model_names(),
        },
    )


@member_required
@require_GET
def live_generations(request: HttpRequest) -> JsonResponse:
    now = timezone.now()
    in_flight = generations_in_flight(now=now, organizations=access(request).organizations)
    return JsonResponse({"generations": [run.as_json(now=now) for run in in_flight]})


@admin_required
@require_POST
async def stop_generation(request: HttpRequest, run_id: str) -> HttpResponse:
    stopped = await services.generation_stop(
        run_id=run_id, organizations=access(request).managed_organizations
    )
    if request.headers.get("Accept", "").startswith("application/json"):
        return JsonResponse({"stopped": stopped, "id": run_id}, status=200 if stopped else 404)
    return redirect("dashboard:live")
