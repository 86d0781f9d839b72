"""Runs: the list, one run's page, its images, download and replay."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import orjson
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.views.decorators.http import require_GET

from core.db_routing import reads_from_replica
from dashboard import services
from dashboard.forms import RunFilterForm
from dashboard.selectors.catalog import (
    deployment_names,
    end_user_names,
    error_codes,
    key_choices,
    model_names,
    organization_choices,
)
from dashboard.selectors.images import run_image as run_image_of
from dashboard.selectors.images import run_images
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
from dashboard.views import access, member_required, seen_or_404
from replay.selectors import chunks_after, read_from, stored_run
from replay.streaming import replay_events
from telemetry.models import Run


@member_required
@require_GET
@reads_from_replica
def runs(request: HttpRequest) -> HttpResponse:
    seen = access(request).organizations
    # The end-user choices are read from the rollups.
    services.usage_rollups_refresh_without_beat()
    form = RunFilterForm(
        request.GET,
        organizations=organization_choices(seen),
        keys=key_choices(seen),
        models=model_names(),
        deployments=deployment_names(),
        end_users=end_user_names(organizations=seen),
        error_codes=error_codes(),
    )
    before, after = form.cursors()
    page = runs_page(replace(form.filters(), organizations=seen), before=before, after=after)
    query = request.GET.copy()
    for name in ("before", "after"):
        query.pop(name, None)
    return render(
        request,
        "dashboard/runs.html",
        {"form": form, "page": page, "query": query.urlencode()},
    )


def _run_or_404(request: HttpRequest, run_id: str) -> Run:
    """The run, if it is of an organization the user sees."""
    run = run_detail(run_id)
    if run is None:
        raise Http404(f"No run {run_id}")
    seen_or_404(request, run.organization_id, f"run {run_id}")
    return run


@member_required
@require_GET
@reads_from_replica
def run(request: HttpRequest, run_id: str) -> HttpResponse:
    found = _run_or_404(request, run_id)
    timeline = run_timeline(found.pk, accepted_at=found.accepted_at)
    return render(
        request,
        "dashboard/run.html",
        {
            "run": found,
            "request_body": body_text(found.request_body),
            "upstream_request": body_text(found.upstream_request),
            "reply": run_reply(found.pk, accepted_at=found.accepted_at),
            "timeline": timeline,
            "chunk_total": run_chunk_count(found.pk, accepted_at=found.accepted_at)
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


@member_required
@require_GET
@reads_from_replica
def run_image(request: HttpRequest, run_id: str, position: int) -> HttpResponse:
    """The bytes of one of the run's images, for its page's thumbnails (and a full view)."""
    _run_or_404(request, run_id)
    found = run_image_of(run_id, position)
    if found is None:
        raise Http404(f"No image {position} in run {run_id}")
    media_type, data = found
    response = HttpResponse(data, content_type=media_type)
    # Shown as the image type it was checked to be, never sniffed as anything else.
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, max-age=3600"
    return response


@member_required
@require_GET
@reads_from_replica
def run_download(request: HttpRequest, run_id: str) -> HttpResponse:
    found = _run_or_404(request, run_id)
    body = orjson.dumps(run_export(found), option=orjson.OPT_INDENT_2, default=str)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{found.pk}.json"'
    return response


@member_required
@require_GET
async def run_replay(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """The stored stream, byte for byte (as `/v1/.../runs/{id}` sends it), for the page's
    Replay button: as fast as possible, or with `pace=original` at the recorded pace."""
    found = await stored_run(run_id)
    if found is None:
        raise Http404(f"No run {run_id}")
    seen_or_404(request, found.organization_id, f"run {run_id}")
    if found.stream is False:
        chunks = await chunks_after(
            found.pk, -1, limit=1, accepted_at=found.accepted_at, using=read_from(found)
        )
        body = bytes(chunks[0].data) if chunks else b"{}"
        return HttpResponse(body, content_type="application/json")
    response = StreamingHttpResponse(
        replay_events(
            found.pk,
            after=-1,
            pace_original=request.GET.get("pace") == "original",
            in_progress=found.status == Run.Status.IN_PROGRESS,
            accepted_at=found.accepted_at,
            using=read_from(found),
        ),
        content_type="text/event-stream",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
