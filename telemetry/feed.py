"""This worker's telemetry subscribers, fed by one reader, within caps, ended on shutdown.

Every `GET /v1/telemetry/stream` a worker serves is fed by one blocking read at a time over all
its subscribers' organizations' streams (`Backplane.read_streams`: on Redis one XREAD, on one
connection), whose events are handed to each subscriber of the organization. A subscriber
costs no Redis connection of its own, so one tenant's many streams cannot use up what another
tenant's need. A new organization's stream joins the read by cancelling it and reading again.

A subscriber resuming from further back than the reader (`Last-Event-ID`) reads what it missed
itself, with reads that do not block, then follows the reader; events are passed on in id
order, each once.

Caps: an organization, and a key, hold at most `MORTAR_TELEMETRY_STREAMS_PER_ORG` and
`MORTAR_TELEMETRY_STREAMS_PER_KEY` streams on a worker; past them a 429 `too_many_streams`. A
subscriber that lets `MAX_UNREAD` events pile up (it does not read) is ended; its client
resumes with `Last-Event-ID`.

`end_streams()` ends every stream at once, and refuses new ones: it runs on SIGTERM
(`config/asgi.py`, `core/termination.py`), before the server waits for its open responses.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncGenerator

import orjson
from django.conf import settings

from core.backplane import Backplane, backplane, entry_position
from core.errors import BackendUnavailable
from core.loops import PerLoop
from telemetry.errors import TooManyStreams
from telemetry.events import STREAM_MAXLEN, Event, stream_name

logger = logging.getLogger(__name__)

READ_SECONDS = 15.0  # how long one read waits for an event before it is made again
RETRY_SECONDS = 0.5  # after a failed read, growing to MAX_RETRY_SECONDS while Redis is away
MAX_RETRY_SECONDS = 5.0
MAX_UNREAD = 10_000
RETRY_AFTER_SECONDS = 5  # told to a client over a cap: streams come and go


class Subscription:
    """One stream's place in the feed: the events handed to it and not yet read."""

    def __init__(self, feed: TelemetryFeed, organization_id: int, key_id: int) -> None:
        self.organization_id = organization_id
        self.key_id = key_id
        self._feed = feed
        self._unread: collections.deque[Event] = collections.deque()
        self._arrived = asyncio.Event()
        self._ended = False
        self.left = False

    def deliver(self, events: list[Event]) -> None:
        if self._ended:
            return
        self._unread.extend(events)
        if len(self._unread) > MAX_UNREAD:
            logger.warning("telemetry: a subscriber fell %d events behind; ending it", MAX_UNREAD)
            self.end()
        self._arrived.set()

    def end(self) -> None:
        """End the stream (it returns once it has read what it was handed)."""
        self._ended = True
        self._arrived.set()

    async def next(self, wait: float) -> list[Event] | None:
        """What arrived since the last call, waiting up to `wait` seconds for something (an
        empty list then); None once the stream is ended."""
        if not self._unread and not self._ended:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), wait)
        self._arrived.clear()
        if self._unread:
            events = list(self._unread)
            self._unread.clear()
            return events
        return None if self._ended else []

    async def backlog(self, after: str) -> list[Event]:
        """The organization's events after the id `after` (a page), read for this stream."""
        return await self._feed.backlog(self.organization_id, after)

    def close(self) -> None:
        """Leave the feed (again is nothing)."""
        self._feed.leave(self)


class _Organization:
    """An organization's subscribers on this worker, and how far the reader has read."""

    def __init__(self, cursor: str) -> None:
        self.cursor = cursor
        self.subscribers: set[Subscription] = set()


class TelemetryFeed:
    """This event loop's reader of the organizations' event streams, and its subscribers."""

    def __init__(self, plane: Backplane, *, per_organization: int, per_key: int) -> None:
        self._backplane = plane
        self._per_organization = per_organization
        self._per_key = per_key
        self._organizations: dict[int, _Organization] = {}
        self._by_organization: collections.Counter[int] = collections.Counter()
        self._by_key: collections.Counter[int] = collections.Counter()
        self._changed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    def join(self, organization_id: int, key_id: int) -> Subscription:
        """Take a place for a stream of the organization's, or raise `TooManyStreams` over a
        cap; the stream starts with `follow_after` (its place is taken until `leave`)."""
        if self._closed:
            raise BackendUnavailable("This worker is shutting down; connect again.")
        held = self._by_organization[organization_id]
        if held >= self._per_organization:
            raise TooManyStreams(
                f"This organization has {held} telemetry streams open on this worker, its "
                f"limit; close one or try again in {RETRY_AFTER_SECONDS} s.",
                retry_after=RETRY_AFTER_SECONDS,
            )
        if self._by_key[key_id] >= self._per_key:
            raise TooManyStreams(
                f"This key has {self._by_key[key_id]} telemetry streams open on this worker, "
                f"its limit; close one or try again in {RETRY_AFTER_SECONDS} s.",
                retry_after=RETRY_AFTER_SECONDS,
            )
        self._by_organization[organization_id] += 1
        self._by_key[key_id] += 1
        return Subscription(self, organization_id, key_id)

    def follow_after(self, subscription: Subscription, after: str) -> str:
        """Hand the subscription the organization's events after the id `after` from now on;
        return the id up to which it reads for itself (the reader's position for the
        organization, when the reader is further on)."""
        organization = self._organizations.get(subscription.organization_id)
        if organization is None:
            organization = _Organization(after)
            self._organizations[subscription.organization_id] = organization
            self._changed.set()  # a stream the reader must read too
        organization.subscribers.add(subscription)
        if self._closed:
            subscription.end()
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read())
        return organization.cursor

    def leave(self, subscription: Subscription) -> None:
        if subscription.left:
            return
        subscription.left = True
        for counts, held_by in (
            (self._by_organization, subscription.organization_id),
            (self._by_key, subscription.key_id),
        ):
            counts[held_by] -= 1
            if not counts[held_by]:
                del counts[held_by]
        organization = self._organizations.get(subscription.organization_id)
        if organization is None:
            return
        organization.subscribers.discard(subscription)
        if not organization.subscribers:
            # Its stream is left out of the next read (the one under way may still return it).
            del self._organizations[subscription.organization_id]

    async def backlog(self, organization_id: int, after: str) -> list[Event]:
        """The organization's events after the id `after`, up to 500, without waiting."""
        stream = self._backplane.stream(stream_name(organization_id), STREAM_MAXLEN)
        entries = await stream.read(after, 0)
        return [Event(id=entry_id, data=orjson.loads(payload)) for entry_id, payload in entries]

    def streams(self) -> int:
        """How many streams this worker serves."""
        return sum(self._by_organization.values())

    def end_streams(self) -> None:
        """End every stream, and refuse new ones (the server is stopping)."""
        self._closed = True
        for organization in list(self._organizations.values()):
            for subscription in list(organization.subscribers):
                subscription.end()

    async def close(self) -> None:
        """End every stream, refuse new ones, stop reading."""
        self.end_streams()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def _read(self) -> None:
        failures = 0
        while self._organizations:
            self._changed.clear()
            after = {stream_name(org): o.cursor for org, o in self._organizations.items()}
            read = asyncio.ensure_future(self._backplane.read_streams(after, READ_SECONDS))
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({read, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                if not read.done():
                    read.cancel()  # nothing is lost: the cursors move only with what was read
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await read
            if read.cancelled():
                continue
            try:
                found = read.result()
            except Exception as error:
                failures += 1
                if failures == 1:
                    level = (
                        logging.WARNING if isinstance(error, BackendUnavailable) else logging.ERROR
                    )
                    logger.log(level, "telemetry: the feed cannot read (%r); retrying", error)
                await asyncio.sleep(min(RETRY_SECONDS * failures, MAX_RETRY_SECONDS))
                continue
            if failures:
                logger.warning("telemetry: the feed reads again")
                failures = 0
            self._hand_out(after, found)

    def _hand_out(self, after: dict[str, str], found: dict[str, list[tuple[str, bytes]]]) -> None:
        for name, entries in found.items():
            organization = self._organizations.get(organization_of(name))
            if organization is None or not entries or organization.cursor != after[name]:
                # Nobody follows it any more, or it was left and joined again during the read
                # (from another place): the next read starts from where it is now.
                continue
            organization.cursor = entries[-1][0]
            events = [
                Event(id=entry_id, data=orjson.loads(payload)) for entry_id, payload in entries
            ]
            for subscription in list(organization.subscribers):
                subscription.deliver(events)


def organization_of(name: str) -> int:
    return int(name.rpartition(":")[2])


telemetry_feed = PerLoop(
    lambda: TelemetryFeed(
        backplane(),
        per_organization=settings.MORTAR_TELEMETRY_STREAMS_PER_ORG,
        per_key=settings.MORTAR_TELEMETRY_STREAMS_PER_KEY,
    )
)


async def follow(
    subscription: Subscription,
    *,
    after: str,
    caught_up: str,
    session: str | None,
    heartbeat: float = 15.0,
) -> AsyncGenerator[Event | None, None]:
    """Yield the organization's events after `after` — first those up to `caught_up`, read
    here, then what the feed hands over — and None every `heartbeat` seconds without any (the
    caller keeps the connection alive). Leaves the feed when it ends."""
    cursor = entry_position(after)
    try:
        end_of_backlog = entry_position(caught_up)
        while cursor < end_of_backlog:
            try:
                backlog = await subscription.backlog(_id(cursor))
            except BackendUnavailable:
                return  # the client resumes with Last-Event-ID
            if not backlog:
                break
            for event in backlog:
                cursor = entry_position(event.id)
                if not session or event.data.get("session") == session:
                    yield event
        while (events := await subscription.next(heartbeat)) is not None:
            if not events:
                yield None
                continue
            for event in events:
                position = entry_position(event.id)
                if position <= cursor:
                    continue  # read with the backlog already
                cursor = position
                if not session or event.data.get("session") == session:
                    yield event
    finally:
        subscription.close()


def _id(position: tuple[int, int]) -> str:
    return f"{position[0]}-{position[1]}"
