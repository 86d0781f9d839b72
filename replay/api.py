"""GET /v1/chat/completions/runs/{id}: replay a stored run as the client saw it.

Errors on this route use Arkor's flat envelope, `{"error": "…", "code": "…"}`.
"""

from __future__ import annotations

import asyncio

import orjson
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Router

from gateway.auth import authenticate
from gateway.errors import AuthenticationError
from replay.selectors import chunks_after, replayable_run
from replay.streaming import replay_events
from telemetry.models import Run

router = Router()
# A run id fresh from a response may reach the database a writer batch later.
NOT_YET_STORED_WAIT = 0.5


def flat_error(status: int, code: str, message: str) -> HttpResponse:
    return HttpResponse(
        orjson.dumps({"error": message, "code": code}),
        status=status,
        content_type="application/json",
    )


def run_gone(run_id: str) -> HttpResponse:
    return flat_error(
        410, "run_gone", f"Run {run_id} is gone: unknown, expired, or not replayable."
    )


@router.get("/chat/completions/runs/{run_id}")
async def replay_run(request: HttpRequest, run_id: str) -> HttpResponse:
    try:
        key = await authenticate(request)
    except AuthenticationError as error:
        return flat_error(error.status, error.code, error.message)
    after = _resume_point(request)
    if after is None:
        return flat_error(
            400, "invalid_parameter", "`Last-Event-ID` and `from` must be whole numbers."
        )

    run = await replayable_run(run_id, key.organization)
    deadline = asyncio.get_running_loop().time() + NOT_YET_STORED_WAIT
    while run is None and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        run = await replayable_run(run_id, key.organization)
    if run is None:
        return run_gone(run_id)

    headers = {"X-Mortar-Run-Id": run.id}
    if run.stream is False:
        # A JSON reply is replayed as the one body the client got.
        chunks = await chunks_after(run.id, -1, limit=1)
        if not chunks:
            return run_gone(run_id)
        return HttpResponse(bytes(chunks[0].data), content_type="application/json", headers=headers)
    if run.stream is None and run.status != Run.Status.IN_PROGRESS:
        return run_gone(run_id)  # refused before it streamed: nothing to replay

    response = StreamingHttpResponse(
        replay_events(
            run.id,
            after=after,
            pace_original=request.GET.get("pace") == "original",
            in_progress=run.status == Run.Status.IN_PROGRESS,
        ),
        content_type="text/event-stream",
        headers=headers,
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _resume_point(request: HttpRequest) -> int | None:
    """The last sequence number the client has: Last-Event-ID, or the one before `from`."""
    last_event_id = request.headers.get("Last-Event-ID")
    start = request.GET.get("from")
    try:
        if last_event_id is not None:
            return int(last_event_id)
        if start is not None:
            return int(start) - 1
    except ValueError:
        return None
    return -1
