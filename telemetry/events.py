"""The live event bus: what the pipeline publishes, and how subscribers read it back.

Events are appended to one stream per organization on the backplane (`core.backplane`): a
Redis Stream when Redis is configured, so events from every worker process reach every
subscriber; a ring buffer in this process on the embedded default. Either way a subscriber that
reconnects with `Last-Event-ID` gets what it missed, within the last `STREAM_MAXLEN` events.
Subscribers are served by their worker's one reader (`telemetry/feed.py`).
The dashboard's websocket gets them too, through the channel layer group `telemetry`, one
message per batch of events, and only while the group has members.

Publishing never blocks a request: `publish()` queues the event, and what was queued within
`BATCH_SECONDS` goes out together — on Redis as pipelined XADDs in one write, without waiting
for the replies.

The schema (every event): `type`, `runId`, `time` (ISO 8601), `session`, plus per type —

    request.accepted        model, deployment, endUser, stream, keyId
    request.routed          deployment, replica, sessionKept
    optimizer.report        report (the stored optimizer report)
    generation.first_token  ttftMs
    generation.finished     finishReason, usage, usageSource, latencyMs
    generation.stopped      usage, usageSource, latencyMs
    generation.failed       httpStatus, code, message
    cache                   promptTokens, cachedTokens, sessionKept, replica, usageSource
    cost                    cost (a decimal string), promptTokens, cachedTokens,
                            completionTokens, usageSource
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from channels.layers import get_channel_layer

from core.backplane import Backplane, Stream, backplane
from core.loops import PerLoop

logger = logging.getLogger(__name__)

STREAM_MAXLEN = 10_000
BATCH_SECONDS = 0.002  # how long an event may wait for others to share its write
DASHBOARD_GROUP = "telemetry"
EVENT_TYPES = (
    "request.accepted",
    "request.routed",
    "optimizer.report",
    "generation.first_token",
    "generation.finished",
    "generation.stopped",
    "generation.failed",
    "cache",
    "cost",
)

Batch = list[tuple[int, dict[str, Any]]]  # (organization id, event) pairs


def stream_name(organization_id: int) -> str:
    """The backplane stream of the organization's events."""
    return f"telemetry:{organization_id}"


@dataclass(frozen=True)
class Event:
    id: str
    data: dict[str, Any]

    def sse(self) -> bytes:
        return (
            f"id: {self.id}\nevent: {self.data['type']}\ndata: ".encode()
            + orjson.dumps(self.data)
            + b"\n\n"
        )


class EventBus:
    """The organizations' event streams, on this event loop's backplane."""

    def __init__(self, plane: Backplane) -> None:
        self.backplane = plane
        self._streams: dict[int, Stream] = {}

    def _stream(self, organization_id: int) -> Stream:
        stream = self._streams.get(organization_id)
        if stream is None:
            stream = self.backplane.stream(stream_name(organization_id), STREAM_MAXLEN)
            self._streams[organization_id] = stream
        return stream

    def append(self, batch: Batch) -> None:
        """Append the events to their organizations' streams, without waiting."""
        streams = self._streams
        for organization_id, data in batch:
            stream = streams.get(organization_id) or self._stream(organization_id)
            stream.append(orjson.dumps(data))

    async def read(self, organization_id: int, after: str, wait: float) -> list[Event]:
        """The organization's events after the id `after`; wait up to `wait` seconds for one."""
        entries = await self._stream(organization_id).read(after, wait)
        return [Event(id=entry_id, data=orjson.loads(payload)) for entry_id, payload in entries]

    async def last_id(self, organization_id: int) -> str:
        return await self._stream(organization_id).last_id()


class EventClock:
    """Now, in ISO 8601 UTC to the millisecond, as events carry it: formatted once a millisecond
    (a request publishes seven events, mostly within one; formatting cost ~1 µs each)."""

    __slots__ = ("_ms", "_text")

    def __init__(self) -> None:
        self._ms = -1
        self._text = ""

    def now(self) -> str:
        ms = int(time.time() * 1000)
        if ms != self._ms:
            self._ms = ms
            self._text = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
        return self._text


class EventPublisher:
    """Queue events from the request path; write them every BATCH_SECONDS, never waiting.

    Events wait up to BATCH_SECONDS and go out together: on Redis one write per batch instead
    of one per event at low load, where each costs a system call here and a read of the
    replies.

    The dashboard gets a batch only while its channel-layer group has members (most of the
    time none is connected, and an empty group_send on Redis still costs two round trips):
    every BATCH_SECONDS the group's size is asked (on Redis one ZCARD, written with the
    events), and what was published meanwhile goes out when it is not 0 — one group_send at a
    time, so batches arrive in order.
    """

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self._backplane = bus.backplane
        self._queue: Batch = []
        self._scheduled = False
        self._loop = asyncio.get_running_loop()
        self._layer = get_channel_layer()
        self._dashboard: list[Batch] = []
        self._dashboard_task: asyncio.Task[None] | None = None
        self._clock = EventClock()

    def publish(self, organization_id: int, event_type: str, run_id: str, **fields: Any) -> None:
        data = {
            "type": event_type,
            "runId": run_id,
            "time": self._clock.now(),
            **fields,
        }
        self._queue.append((organization_id, data))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_later(BATCH_SECONDS, self._write_late)

    async def flush(self) -> None:
        """Return once everything published so far is written (and sent to the dashboard)."""
        self._write_late()
        await self._backplane.barrier()
        if self._dashboard_task is not None:
            await self._dashboard_task  # every batch is queued for it by now

    def _write_late(self) -> None:
        self._scheduled = False
        if not self._queue:
            return
        batch, self._queue = self._queue, []
        self.bus.append(batch)
        if self._layer is not None:
            self._backplane.if_group_has_members(
                self._layer, DASHBOARD_GROUP, lambda: self._to_dashboard(batch)
            )
        self._backplane.send_now()

    def _to_dashboard(self, batch: Batch) -> None:
        self._dashboard.append(batch)
        if self._dashboard_task is None or self._dashboard_task.done():
            self._dashboard_task = self._loop.create_task(self._send_to_dashboard())

    async def _send_to_dashboard(self) -> None:
        assert self._layer is not None
        while self._dashboard:
            # Whatever queued up during the last group_send goes in the next one, in order.
            batch = [event for queued in self._dashboard for event in queued]
            self._dashboard.clear()
            try:
                await self._layer.group_send(DASHBOARD_GROUP, _dashboard_message(batch))
            except Exception:
                logger.exception("telemetry: the dashboard missed %d events", len(batch))


def _dashboard_message(batch: Batch) -> dict[str, Any]:
    # One message per batch, not per event: the dashboard is one consumer among many
    # publishers, and each group_send is several round trips.
    return {
        "type": "telemetry.batch",
        "events": [{"organization": organization_id, **data} for organization_id, data in batch],
    }


event_bus = PerLoop(lambda: EventBus(backplane()))
event_publisher = PerLoop(lambda: EventPublisher(event_bus()))


async def latest_event_id(organization_id: int) -> str:
    """The id of the organization's newest event: subscribe after it to get what comes next."""
    return await event_bus().last_id(organization_id)
