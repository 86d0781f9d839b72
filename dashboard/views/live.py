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
from dashboard.views import staff_required


@staff_required
@require_GET
def live(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    return render(
        request,
        "dashboard/live.html",
        {
            "in_flight": [run.as_json(now=now) for run in generations_in_flight(now=now)],
            "organizations": dict(organization_choices()),
            "keys": dict(key_choices()),
            "models": model_names(),
        },
    )


@staff_required
@require_GET
def live_generations(request: HttpRequest) -> JsonResponse:
    now = timezone.now()
    return JsonResponse(
        {"generations": [run.as_json(now=now) for run in generations_in_flight(now=now)]}
    )


@staff_required
@require_POST
async def stop_generation(request: HttpRequest, run_id: str) -> HttpResponse:
    stopped = await services.generation_stop(run_id=run_id)
    if request.headers.get("Accept", "").startswith("application/json"):
        return JsonResponse({"stopped": stopped, "id": run_id}, status=200 if stopped else 404)
    return redirect("dashboard:live")
