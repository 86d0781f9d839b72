"""GET /v1/telemetry/stream: the organization's live events as server-sent events."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator

from accounts.auth import api_key_auth, key_of
from core.errors import InvalidParameter
from core.http.openapi import SchemaRef, error_responses, event_stream_content, json_text
from core.http.requests import ApiRequest
from core.http.responses import EventStreamResponse
from core.http.routes import ApiRouter
from telemetry.events import EVENT_TYPES, Event, latest_event_id
from telemetry.feed import follow, telemetry_feed
from telemetry.schemas import EVENT_STREAM_EXAMPLE, TelemetryEvent

router = ApiRouter(auth=api_key_auth())
KEEP_ALIVE = b": keep-alive\n\n"
# A Redis stream id (also the embedded bus's): two unsigned 64-bit numbers, in ASCII digits.
EVENT_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")
EVENT_ID_SCHEMA = {
    "type": "string",
    "pattern": f"^{EVENT_ID.pattern}$",
    "description": "Each number below 2^64.",
    "examples": ["1767225600000-0"],
}

# The view reads its query and headers itself; they are declared here for /v1/openapi.json.
STREAM_DOCS = {
    "parameters": [
        {
            "in": "query",
            "name": "session",
            "description": "Only this session's events.",
            "schema": {"type": "string"},
        },
        {
            "in": "query",
            "name": "last_event_id",
            "description": "Resume after this event (for clients that cannot send the header).",
            "schema": EVENT_ID_SCHEMA,
        },
        {
            "in": "header",
            "name": "Last-Event-ID",
            "description": "Resume after this event: the `id` of the last one received.",
            "schema": EVENT_ID_SCHEMA,
        },
    ],
    "responses": {
        200: {
            "description": "The organization's live events; the stream does not end by itself.",
            "content": event_stream_content(
                {
                    "id": EVENT_ID_SCHEMA,
                    "event": {"type": "string", "enum": list(EVENT_TYPES)},
                    "data": json_text(SchemaRef(TelemetryEvent)),
                },
                required=["id", "event", "data"],
                description="One live event: its id (to resume from), its type, and the event "
                "as JSON. The stream opens with a `: connected` comment, and sends "
                "`: keep-alive` comments while it is quiet.",
                example=EVENT_STREAM_EXAMPLE,
            ),
        }
    },
}


@router.get(
    "/stream",
    operation_id="telemetry_stream",
    tags=["Telemetry"],
    summary="Stream serving telemetry",
    response=error_responses(400, 401, 429, 503, envelope=router.envelope),
    openapi_extra=STREAM_DOCS,
)
async def telemetry_stream(request: ApiRequest) -> EventStreamResponse:
    """Stream the organization's live events as server-sent events, resumable with
    Last-Event-ID. An organization and a key hold a limited number of streams at once (429
    `too_many_streams`, with `Retry-After`); without Redis, 503 `backend_unavailable`."""
    key = key_of(request)
    header = request.headers.get("Last-Event-ID")
    after = header or request.GET.get("last_event_id")
    if after is not None and not _is_event_id(after):
        raise InvalidParameter(
            "`Last-Event-ID` must be an event id such as 1700000000000-0, each number below 2^64.",
            param="Last-Event-ID" if header else "last_event_id",
        )
    session = request.GET.get("session") or None
    feed = telemetry_feed()
    subscription = feed.join(key.organization_id, key.id)  # over a cap: nothing asked of Redis
    try:
        # "From now" is fixed before the response starts: an event published once the client
        # has its headers (`: connected`) is never missed.
        if after is None:
            after = await latest_event_id(key.organization_id)
    except BaseException:
        subscription.close()
        raise
    # From here the response's end (`on_finish`, even for a client that left before reading
    # it) gives the place back.
    caught_up = feed.follow_after(subscription, after)
    events = follow(subscription, after=after, caught_up=caught_up, session=session)
    return EventStreamResponse(_sse(events), headers={}, on_finish=subscription.close)


async def _sse(events: AsyncGenerator[Event | None, None]) -> AsyncGenerator[bytes, None]:
    yield b": connected\n\n"  # headers out now, before the first event
    async with contextlib.aclosing(events):  # a stream that ends leaves the feed now
        async for event in events:
            yield KEEP_ALIVE if event is None else event.sse()


def _is_event_id(value: str) -> bool:
    # Checked here, not where it is read: the stream has started by then (a 200), and the id
    # would end it with Redis' "Invalid stream ID".
    match = EVENT_ID.fullmatch(value)
    return match is not None and all(int(part) < 2**64 for part in match.groups(default="0"))
