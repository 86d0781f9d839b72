"""GET /v1/chat/completions/runs/{id}: replay a stored run as the client saw it.

Any run, whatever its surface: a chat completion's chunks, or a Messages run's Anthropic events
(`msg_…` ids), each re-emitted exactly as it was sent. Every error on this route is answered in
its flat envelope, `{"error": "…", "code": "…"}` (`replay.envelope`), which the router declares.
"""

from __future__ import annotations

import asyncio

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from ninja import P, PathEx

from accounts.auth import api_key_auth, key_of
from core.errors import InvalidParameter
from core.http.envelopes import ErrorEnvelope
from core.http.openapi import (
    SchemaRef,
    error_responses,
    event_stream_content,
    json_content,
    json_text,
)
from core.http.requests import ApiRequest
from core.http.routes import ApiRouter
from core.ids import is_run_id
from gateway.contract.docs import CHUNK_DATA
from gateway.contract.response import ChatCompletion
from gateway.surfaces.messages.docs import STREAM_EVENT_NAMES
from gateway.surfaces.messages.envelope import AnthropicErrorEnvelope
from gateway.surfaces.messages.response import Message, StreamEventData
from replay.envelope import FLAT_ENVELOPE
from replay.selectors import chunks_after, read_from, replayable_run
from replay.streaming import replay_events
from telemetry.errors import RunGone
from telemetry.models import Run

router = ApiRouter(auth=api_key_auth(), envelope=FLAT_ENVELOPE)
# A run id fresh from a response may reach the database a writer batch later.
NOT_YET_STORED_WAIT = 0.5


def run_gone(run_id: str) -> RunGone:
    return RunGone(f"Run {run_id} is gone: unknown, expired, or not replayable.")


# The view reads its query and headers itself; they are declared here for /v1/openapi.json.
REPLAY_DOCS = {
    "parameters": [
        {
            "in": "query",
            "name": "from",
            "description": "Replay from this event's sequence number on.",
            "schema": {"type": "integer", "minimum": 0},
        },
        {
            "in": "query",
            "name": "pace",
            "description": "`original` replays at the pace the run was sent; by default the "
            "stored events come at once.",
            "schema": {"type": "string", "enum": ["original"]},
        },
        {
            "in": "header",
            "name": "Last-Event-ID",
            "description": "Resume after this event: the `id` of the last one received.",
            "schema": {"type": "string", "pattern": "^[0-9]+$"},
        },
    ],
    "responses": {
        200: {
            "description": "The run as its client received it: the stored JSON body of a "
            "non-streaming run (a chat completion or a Message, or the error it failed with), "
            "or the stream's events, each behind an `id: <sequence number>` line.",
            "content": {
                **json_content(
                    {
                        "anyOf": [
                            SchemaRef(ChatCompletion),
                            SchemaRef(ErrorEnvelope),
                            SchemaRef(Message),
                            SchemaRef(AnthropicErrorEnvelope),
                        ]
                    }
                ),
                **event_stream_content(
                    {
                        "id": {"type": "string", "pattern": "^[0-9]+$"},
                        "event": {
                            "type": "string",
                            "enum": STREAM_EVENT_NAMES,
                            "description": "On a Messages run's events (Anthropic's names).",
                        },
                        "data": {
                            "anyOf": [
                                CHUNK_DATA,
                                json_text(
                                    {
                                        "anyOf": [
                                            SchemaRef(StreamEventData),
                                            SchemaRef(AnthropicErrorEnvelope),
                                        ]
                                    }
                                ),
                            ]
                        },
                    },
                    required=["id", "data"],
                    description="A stored event, byte for byte, behind an `id:` line holding "
                    "its sequence number (pings included). A Messages run's events keep their "
                    "`event:` line and Anthropic's `data`.",
                    example='id: 0\ndata: {"id":"chatcmpl-1e3a5c7b9d0f2a4c6e8b0d1f",…}\n\n',
                ),
            },
        }
    },
}


@router.get(
    "/chat/completions/runs/{run_id}",
    operation_id="replay_run",
    tags=["Replay"],
    summary="Replay a stored run",
    response=error_responses(400, 401, 410, envelope=router.envelope),
    openapi_extra=REPLAY_DOCS,
)
async def replay_run(
    request: ApiRequest,
    run_id: PathEx[str, P(description="The run's ID: its completion's or message's ID.")],
) -> HttpResponseBase:
    """Replay a stored run as the client received it, byte for byte."""
    key = key_of(request)
    if not is_run_id(run_id):
        raise run_gone(run_id)
    after = _resume_point(request)
    if after is None:
        raise InvalidParameter("`Last-Event-ID` and `from` must be whole numbers.")

    run = await replayable_run(run_id, key.organization)
    deadline = asyncio.get_running_loop().time() + NOT_YET_STORED_WAIT
    while run is None and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        run = await replayable_run(run_id, key.organization)
    if run is None:
        raise run_gone(run_id)

    headers = {"X-Mortar-Run-Id": run.id}
    if run.stream is False:
        # A JSON reply is replayed as the one body the client got.
        chunks = await chunks_after(
            run.id, -1, limit=1, accepted_at=run.accepted_at, using=read_from(run)
        )
        if not chunks:
            raise run_gone(run_id)
        return HttpResponse(bytes(chunks[0].data), content_type="application/json", headers=headers)
    if run.stream is None and run.status != Run.Status.IN_PROGRESS:
        raise run_gone(run_id)  # refused before it streamed: nothing to replay

    response = StreamingHttpResponse(
        replay_events(
            run.id,
            after=after,
            pace_original=request.GET.get("pace") == "original",
            in_progress=run.status == Run.Status.IN_PROGRESS,
            accepted_at=run.accepted_at,
            using=read_from(run),
        ),
        content_type="text/event-stream",
        headers=headers,
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _resume_point(request: ApiRequest) -> int | None:
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
