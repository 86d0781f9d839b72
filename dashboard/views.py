"""The operator dashboard's pages: each parses its filters, calls a selector or a service, and
renders. Every page is for staff only (`staff_required`); every POST is CSRF-checked by
Django's middleware."""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.staticfiles import finders
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard import services
from dashboard.csv_export import csv_response
from dashboard.forms import FINISH_REASONS, AuditForm, OverviewForm, RunFilterForm, SessionForm
from dashboard.selectors.audit import AUDIT_DIMENSIONS, audit_csv_rows, audit_rows, audit_totals
from dashboard.selectors.budgets import budget_rows
from dashboard.selectors.catalog import (
    deployment_names,
    key_choices,
    model_names,
    organization_choices,
)
from dashboard.selectors.images import run_image as run_image_of
from dashboard.selectors.images import run_images
from dashboard.selectors.live import generations_in_flight
from dashboard.selectors.overview import overview as overview_of
from dashboard.selectors.runs import (
    TIMELINE_LIMIT,
    body_text,
    run_chunk_count,
    run_curl,
    run_detail,
    run_export,
    run_reply,
    run_timeline,
    runs_page,
)
from dashboard.selectors.sessions import session_summaries
from replay.selectors import chunks_after
from replay.streaming import replay_events
from telemetry.models import Run

View = TypeVar("View", bound=Callable[..., Any])


def staff_required(view: View) -> View:
    """Staff only: anyone else is sent to the dashboard's sign-in."""
    return staff_member_required(view, login_url="dashboard:login")


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
def overview(request: HttpRequest) -> HttpResponse:
    form = OverviewForm(
        request.GET,
        organizations=organization_choices(),
        models=model_names(),
        deployments=deployment_names(),
    )
    services.usage_rollups_refresh_without_beat()
    filters = form.filters(now=timezone.now())
    figures = overview_of(filters)
    charts = {"hours": figures.hours, "series": figures.series}
    return render(
        request,
        "dashboard/overview.html",
        {"form": form, "filters": filters, "figures": figures, "charts": charts},
    )


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


@staff_required
@require_GET
def runs(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET, organizations=organization_choices(), keys=key_choices())
    before, after = form.cursors()
    page = runs_page(form.filters(), before=before, after=after)
    query = request.GET.copy()
    for name in ("before", "after"):
        query.pop(name, None)
    return render(
        request,
        "dashboard/runs.html",
        {
            "form": form,
            "page": page,
            "query": query.urlencode(),
            "models": model_names(),
            "deployments": deployment_names(),
            "statuses": Run.Status.values,
            "finish_reasons": FINISH_REASONS,
        },
    )


def _run_or_404(run_id: str) -> Run:
    run = run_detail(run_id)
    if run is None:
        raise Http404(f"No run {run_id}")
    return run


@staff_required
@require_GET
def run(request: HttpRequest, run_id: str) -> HttpResponse:
    found = _run_or_404(run_id)
    timeline = run_timeline(found.pk)
    return render(
        request,
        "dashboard/run.html",
        {
            "run": found,
            "request_body": body_text(found.request_body),
            "upstream_request": body_text(found.upstream_request),
            "reply": run_reply(found.pk),
            "timeline": timeline,
            "chunk_total": run_chunk_count(found.pk)
            if len(timeline) >= TIMELINE_LIMIT
            else len(timeline),
            "curl": run_curl(found, base_url=request.build_absolute_uri("/")),
            "latency": _between(found.accepted_at, found.finished_at),
            "ttft": _between(found.accepted_at, found.first_token_at),
            "images": run_images(found.pk),
            "optimizer_report": _pretty(found.optimizer_report),
            "tool_selector_report": _pretty(found.tool_selector_report),
            "usage": _pretty(found.usage),
        },
    )


def _between(start: datetime | None, end: datetime | None) -> timedelta | None:
    return end - start if start and end else None


def _pretty(value: object) -> str | None:
    if value is None:
        return None
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


@staff_required
@require_GET
def run_image(request: HttpRequest, run_id: str, position: int) -> HttpResponse:
    """The bytes of one of the run's images, for its page's thumbnails (and a full view)."""
    found = run_image_of(run_id, position)
    if found is None:
        raise Http404(f"No image {position} in run {run_id}")
    media_type, data = found
    response = HttpResponse(data, content_type=media_type)
    # Shown as the image type it was checked to be, never sniffed as anything else.
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, max-age=3600"
    return response


@staff_required
@require_GET
def run_download(request: HttpRequest, run_id: str) -> HttpResponse:
    found = _run_or_404(run_id)
    body = orjson.dumps(run_export(found), option=orjson.OPT_INDENT_2, default=str)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{found.pk}.json"'
    return response


@staff_required
@require_GET
async def run_replay(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """The stored stream, byte for byte (as `/v1/.../runs/{id}` sends it), for the page's
    Replay button: as fast as possible, or with `pace=original` at the recorded pace."""
    found = await Run.objects.filter(pk=run_id).afirst()
    if found is None:
        raise Http404(f"No run {run_id}")
    if found.stream is False:
        chunks = await chunks_after(found.pk, -1, limit=1)
        body = bytes(chunks[0].data) if chunks else b"{}"
        return HttpResponse(body, content_type="application/json")
    response = StreamingHttpResponse(
        replay_events(
            found.pk,
            after=-1,
            pace_original=request.GET.get("pace") == "original",
            in_progress=found.status == Run.Status.IN_PROGRESS,
        ),
        content_type="text/event-stream",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


@staff_required
@require_GET
def sessions(request: HttpRequest) -> HttpResponse:
    form = SessionForm(request.GET, organizations=organization_choices())
    query = form.query(now=timezone.now())
    params = request.GET.copy()
    params.pop("sort", None)
    return render(
        request,
        "dashboard/sessions.html",
        {
            "form": form,
            "query": query,
            "sessions": session_summaries(query),
            "params": params.urlencode(),
        },
    )


@staff_required
@require_GET
def budgets(request: HttpRequest) -> HttpResponse:
    """Spend against budget per organization and key, in the current period."""
    return render(request, "dashboard/budgets.html", {"rows": budget_rows(now=timezone.now())})


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


@require_GET
def asset(request: HttpRequest, path: str) -> FileResponse:
    """The dashboard's own and vendored static files (the ASGI server serves no /static/)."""
    if not path.startswith("dashboard/") or ".." in path:
        raise Http404(path)
    found = finders.find(path)
    if not found:
        raise Http404(path)
    content_type = mimetypes.guess_type(str(found))[0] or "application/octet-stream"
    response = FileResponse(open(found, "rb"), content_type=content_type)  # noqa: SIM115
    response["Cache-Control"] = "public, max-age=3600"
    return response
