"""GET /v1/telemetry/stream: the organization's live events as server-sent events."""

from __future__ import annotations

from collections.abc import AsyncIterator

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Router

from gateway.auth import authenticate
from gateway.errors import InvalidParameter
from telemetry.events import Event, subscribe

router = Router()
KEEP_ALIVE = b": keep-alive\n\n"


@router.get("/stream")
async def telemetry_stream(request: HttpRequest) -> StreamingHttpResponse:
    key = await authenticate(request)
    after = request.headers.get("Last-Event-ID") or request.GET.get("last_event_id")
    if after is not None and not _is_event_id(after):
        raise InvalidParameter("`Last-Event-ID` must be an event id such as 1700000000000-0.")
    session = request.GET.get("session") or None
    events = subscribe(key.organization_id, after=after, session=session)
    response = StreamingHttpResponse(_sse(events), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _sse(events: AsyncIterator[Event | None]) -> AsyncIterator[bytes]:
    yield b": connected\n\n"  # headers out now, before the first event
    async for event in events:
        yield KEEP_ALIVE if event is None else event.sse()


def _is_event_id(value: str) -> bool:
    ms, _, seq = value.partition("-")
    return ms.isdigit() and (seq == "" or seq.isdigit())
