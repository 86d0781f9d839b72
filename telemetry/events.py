"""The live event bus: what the pipeline publishes, and how subscribers read it back.

Events are appended to one stream per organization — a Redis Stream when Redis is configured
(so events from every worker process reach every subscriber, and a subscriber that reconnects
with `Last-Event-ID` gets what it missed, within the last `STREAM_MAXLEN` events), an
in-process ring buffer on the embedded default. Each event is also sent to the channel layer
group `telemetry` for the dashboard's websocket, one message per batch of events (with Redis,
only while the group has members).

Publishing never blocks a request: `publish()` appends to a queue. With Redis, what one pass of
the event loop queued goes out as pipelined XADDs in one write on `gateway/pipelined.py`'s
connection, and nothing waits for the replies; on the embedded default a background task drains
the queue.

The schema (every event): `type`, `runId`, `time` (ISO 8601), `session`, plus per type —

    request.accepted        model, deployment, endUser, stream
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
import collections
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from channels.layers import get_channel_layer
from django.conf import settings

from gateway.pipelined import pack, pipelined_connection

logger = logging.getLogger(__name__)

STREAM_MAXLEN = 10_000
BATCH_SECONDS = 0.002  # how long an event may wait for others to share its write to Redis
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


def stream_key(organization_id: int) -> str:
    return f"{settings.REDIS_PREFIX}:telemetry:{organization_id}"


class MemoryBus:
    """The embedded default: a ring buffer per organization, in this process."""

    def __init__(self) -> None:
        self._events: dict[int, collections.deque[Event]] = {}
        self._counter = 0
        self._changed = asyncio.Condition()

    async def append(self, batch: list[tuple[int, dict[str, Any]]]) -> None:
        async with self._changed:
            for organization_id, data in batch:
                self._counter += 1
                ring = self._events.setdefault(
                    organization_id, collections.deque(maxlen=STREAM_MAXLEN)
                )
                ring.append(Event(id=f"{self._counter}-0", data=data))
            self._changed.notify_all()

    async def read(self, organization_id: int, after: str, wait: float) -> list[Event]:
        def newer() -> list[Event]:
            ring = self._events.get(organization_id, ())
            return [e for e in ring if _id_after(e.id, after)]

        async with self._changed:
            found = newer()
            if not found:
                try:
                    await asyncio.wait_for(self._changed.wait(), wait)
                except TimeoutError:
                    return []
                found = newer()
        return found

    async def last_id(self, organization_id: int) -> str:
        ring = self._events.get(organization_id)
        return ring[-1].id if ring else "0-0"


class RedisBus:
    """Redis Streams: one per organization, capped near STREAM_MAXLEN entries.

    Appends go through this loop's pipelined connection (`gateway/pipelined.py`): packed here,
    written at the end of the loop's pass, never awaited. Reads use redis-py.
    """

    def __init__(self, url: str) -> None:
        import redis.asyncio as redis

        self._redis = redis.from_url(url)
        self._xadd_heads: dict[int, bytes] = {}

    def _xadd_head(self, organization_id: int) -> bytes:
        """`XADD {key} MAXLEN ~ {STREAM_MAXLEN} * data`, packed, less the payload argument."""
        head = self._xadd_heads.get(organization_id)
        if head is None:
            key = stream_key(organization_id)
            # Nine arguments; the ninth (the payload) is appended per event.
            head = pack(b"XADD", key, b"MAXLEN", b"~", STREAM_MAXLEN, b"*", b"data", b"")
            head = self._xadd_heads[organization_id] = head.removesuffix(b"$0\r\n\r\n")
        return head

    def append_nowait(self, batch: list[tuple[int, dict[str, Any]]]) -> None:
        redis = pipelined_connection()
        for organization_id, data in batch:
            payload = orjson.dumps(data)
            redis.send_packed(
                b"%b$%d\r\n%b\r\n" % (self._xadd_head(organization_id), len(payload), payload)
            )

    async def append(self, batch: list[tuple[int, dict[str, Any]]]) -> None:
        self.append_nowait(batch)
        await pipelined_connection().barrier()

    async def read(self, organization_id: int, after: str, wait: float) -> list[Event]:
        reply = await self._redis.xread(
            {stream_key(organization_id): after}, block=int(wait * 1000), count=500
        )
        events = []
        for _, entries in reply or ():
            for entry_id, fields in entries:
                events.append(Event(id=entry_id.decode(), data=orjson.loads(fields[b"data"])))
        return events

    async def last_id(self, organization_id: int) -> str:
        entries = await self._redis.xrevrange(stream_key(organization_id), count=1)
        return entries[0][0].decode() if entries else "0-0"


def _id_after(event_id: str, after: str) -> bool:
    def key(value: str) -> tuple[int, int]:
        ms, _, seq = value.partition("-")
        return int(ms or 0), int(seq or 0)

    return key(event_id) > key(after)


class EventPublisher:
    """Queue events from the request path; write them in the background, in order."""

    def __init__(self, bus: MemoryBus | RedisBus) -> None:
        self.bus = bus
        self._queue: collections.deque[tuple[int, dict[str, Any]]] = collections.deque()
        self._has_work = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def publish(self, organization_id: int, event_type: str, run_id: str, **fields: Any) -> None:
        data = {
            "type": event_type,
            "runId": run_id,
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            **fields,
        }
        self._queue.append((organization_id, data))
        self._idle.clear()
        self._has_work.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain_forever())

    async def flush(self) -> None:
        """Return once everything published so far is written."""
        await self._idle.wait()

    async def _drain_forever(self) -> None:
        layer = get_channel_layer()
        while True:
            if not self._queue:
                self._idle.set()
                self._has_work.clear()
                await self._has_work.wait()
            batch = list(self._queue)
            self._queue.clear()
            try:
                await self.bus.append(batch)
                if layer is not None:
                    await layer.group_send(DASHBOARD_GROUP, _dashboard_message(batch))
            except Exception:
                # Live telemetry is best effort; the run store is the record.
                logger.exception("telemetry: dropped %d events", len(batch))


class RedisEventPublisher(EventPublisher):
    """Write events as XADDs on the pipelined connection, no task, no waiting for replies.

    Events wait up to BATCH_SECONDS and go out together: one write per batch instead of one
    per event at low load, where each costs a system call here and a read of the replies.

    The dashboard gets a batch only while its channel-layer group has members (most of the
    time none is connected, and an empty group_send still costs two round trips): every
    BATCH_SECONDS the group's size is asked (one ZCARD, written with the events), and what was
    published meanwhile goes out when the answer is not 0 — one group_send at a time, so
    batches arrive in order.
    """

    def __init__(self, bus: RedisBus) -> None:
        super().__init__(bus)
        self._redis_bus = bus
        self._scheduled = False
        self._loop = asyncio.get_running_loop()
        self._layer = get_channel_layer()
        self._group_size: bytes | None = None
        if self._layer is not None and _is_on_our_redis(self._layer):
            self._group_size = pack(b"ZCARD", self._layer._group_key(DASHBOARD_GROUP))
        self._dashboard: collections.deque[list[tuple[int, dict[str, Any]]]] = collections.deque()
        self._for_dashboard: list[tuple[int, dict[str, Any]]] = []  # once the timer fires
        self._dashboard_task: asyncio.Task[None] | None = None

    def publish(self, organization_id: int, event_type: str, run_id: str, **fields: Any) -> None:
        data = {
            "type": event_type,
            "runId": run_id,
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            **fields,
        }
        self._queue.append((organization_id, data))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_later(BATCH_SECONDS, self._write_late)

    async def flush(self) -> None:
        self._write_late()
        await pipelined_connection().barrier()
        if self._dashboard_task is not None:
            await self._dashboard_task  # every batch is queued for it by now

    def _write_late(self) -> None:
        self._scheduled = False
        self._write()
        if self._for_dashboard:
            batch, self._for_dashboard = self._for_dashboard, []
            if self._group_size is None:
                self._to_dashboard(batch)
            else:

                def group_size(reply: Any) -> None:
                    if isinstance(reply, int) and reply > 0:
                        self._to_dashboard(batch)

                pipelined_connection().send_packed(self._group_size, group_size)
        pipelined_connection().write_now()

    def _write(self) -> None:
        if not self._queue:
            return
        batch = list(self._queue)
        self._queue.clear()
        self._redis_bus.append_nowait(batch)
        if self._layer is not None:
            self._for_dashboard.extend(batch)

    def _to_dashboard(self, batch: list[tuple[int, dict[str, Any]]]) -> None:
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


def _dashboard_message(batch: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    # One message per batch, not per event: the dashboard is one consumer among many
    # publishers, and each group_send is several round trips.
    return {
        "type": "telemetry.batch",
        "events": [{"organization": organization_id, **data} for organization_id, data in batch],
    }


def _is_on_our_redis(layer: Any) -> bool:
    """Whether the channel layer is channels-redis on REDIS_URL alone (its groups are ours to
    count)."""
    try:
        from channels_redis.core import RedisChannelLayer
    except ImportError:
        return False
    return (
        isinstance(layer, RedisChannelLayer)
        and len(layer.hosts) == 1
        and layer.hosts[0].get("address") == settings.REDIS_URL
        and hasattr(layer, "_group_key")
    )


_publishers: dict[asyncio.AbstractEventLoop, EventPublisher] = {}
_memory_bus = MemoryBus()


def event_bus() -> MemoryBus | RedisBus:
    if settings.REDIS_URL:
        return _redis_bus()
    return _memory_bus


_redis_buses: dict[asyncio.AbstractEventLoop, RedisBus] = {}


def _redis_bus() -> RedisBus:
    loop = asyncio.get_running_loop()
    bus = _redis_buses.get(loop)
    if bus is None:
        bus = _redis_buses[loop] = RedisBus(settings.REDIS_URL)
    return bus


def event_publisher() -> EventPublisher:
    loop = asyncio.get_running_loop()
    publisher = _publishers.get(loop)
    if publisher is None:
        bus = event_bus()
        publisher = _publishers[loop] = (
            RedisEventPublisher(bus) if isinstance(bus, RedisBus) else EventPublisher(bus)
        )
    return publisher


async def subscribe(
    organization_id: int, *, after: str | None, session: str | None, heartbeat: float = 15.0
) -> AsyncIterator[Event | None]:
    """Yield the organization's events after `after` (or from now), then follow live.

    Yields None every `heartbeat` seconds without events, so the caller can keep the
    connection alive.
    """
    bus = event_bus()
    cursor = after if after is not None else await bus.last_id(organization_id)
    while True:
        events = await bus.read(organization_id, cursor, heartbeat)
        if not events:
            yield None
            continue
        for event in events:
            cursor = event.id
            if session and event.data.get("session") != session:
                continue
            yield event
