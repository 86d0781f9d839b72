"""The telemetry feed (`telemetry/feed.py`) on both backplanes: one reader for every
subscriber, each event once and in order whatever the resume point, the caps, and the end."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Callable

import pytest
from django.conf import settings

from core.backplane import NO_ENTRY, Backplane
from core.errors import BackendUnavailable
from telemetry.errors import TooManyStreams
from telemetry.events import Event, EventBus
from telemetry.feed import Subscription, TelemetryFeed, follow
from tests.core.conftest import make_plane  # noqa: F401  (the backplanes of each kind)
from tests.support.waiting import wait_until_async

PREFIX = f"{settings.REDIS_PREFIX}-feed-test"  # no server process of the suite hears it
organizations = itertools.count(10_000_000)  # ids no other test's streams use


def publish(plane: Backplane, organization_id: int, *runs: str) -> None:
    EventBus(plane).append([(organization_id, {"type": "cost", "runId": run}) for run in runs])


async def last_id(plane: Backplane, organization_id: int) -> str:
    await plane.barrier()
    return await EventBus(plane).last_id(organization_id)


class Reader:
    """A subscriber's events, read on a task as the stream route would."""

    def __init__(self, events: AsyncGenerator[Event | None, None]) -> None:
        self.events: list[Event] = []
        self.ended = asyncio.Event()
        self._events = events
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for event in self._events:
                if event is not None:
                    self.events.append(event)
        finally:
            self.ended.set()

    def runs(self) -> list[str]:
        return [event.data["runId"] for event in self.events]

    async def until(self, count: int) -> list[str]:
        await wait_until_async(lambda: len(self.events) >= count, within=5)
        return self.runs()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def start(feed: TelemetryFeed, organization_id: int, key_id: int, after: str) -> Reader:
    subscription: Subscription = feed.join(organization_id, key_id)
    caught_up = feed.follow_after(subscription, after)
    return Reader(follow(subscription, after=after, caught_up=caught_up, session=None))


@pytest.fixture
async def plane(make_plane: Callable[[], Backplane]) -> Backplane:  # noqa: F811
    return make_plane()


async def test_every_subscriber_gets_each_event_once_in_order_whatever_its_resume_point(
    plane: Backplane,
) -> None:
    feed = TelemetryFeed(plane, per_organization=50, per_key=20)
    org = next(organizations)
    publish(plane, org, "r1", "r2")
    after_r2 = await last_id(plane, org)
    live = start(feed, org, 1, after_r2)
    publish(plane, org, "r3")
    assert await live.until(1) == ["r3"]

    # One resuming from the start reads what the feed has passed itself, then follows it.
    resumed = start(feed, org, 1, NO_ENTRY)
    publish(plane, org, "r4")
    assert await resumed.until(4) == ["r1", "r2", "r3", "r4"]
    assert await live.until(2) == ["r3", "r4"]
    await asyncio.sleep(0.1)
    assert resumed.runs() == ["r1", "r2", "r3", "r4"]  # nothing twice
    assert feed.streams() == 2
    await resumed.close()
    await live.close()
    assert feed.streams() == 0
    await feed.close()


async def test_a_subscriber_gets_only_its_organization_s_events(plane: Backplane) -> None:
    feed = TelemetryFeed(plane, per_organization=50, per_key=20)
    mine, theirs = next(organizations), next(organizations)
    reader = start(feed, mine, 1, await last_id(plane, mine))
    other = start(feed, theirs, 2, await last_id(plane, theirs))  # joins the read under way
    publish(plane, theirs, "t1")
    publish(plane, mine, "m1")
    assert await reader.until(1) == ["m1"]
    assert await other.until(1) == ["t1"]
    await asyncio.sleep(0.1)
    assert reader.runs() == ["m1"]
    await reader.close()
    await other.close()
    await feed.close()


async def test_the_caps_count_streams_per_organization_and_per_key(plane: Backplane) -> None:
    feed = TelemetryFeed(plane, per_organization=3, per_key=2)
    org = next(organizations)
    held = [feed.join(org, 1), feed.join(org, 1)]
    with pytest.raises(TooManyStreams) as over_key:
        feed.join(org, 1)
    assert "key" in over_key.value.message and over_key.value.retry_after == 5
    held.append(feed.join(org, 2))
    with pytest.raises(TooManyStreams) as over_organization:
        feed.join(org, 3)
    assert "organization" in over_organization.value.message
    feed.join(next(organizations), 3).close()  # another organization is not held back

    held.pop().close()
    held[-1].close()
    held[-1].close()  # leaving twice gives back one place
    assert feed.streams() == 1
    feed.join(org, 1).close()
    feed.join(org, 3).close()
    await feed.close()


async def test_ending_the_streams_ends_every_subscriber_and_refuses_new_ones(
    plane: Backplane,
) -> None:
    feed = TelemetryFeed(plane, per_organization=50, per_key=20)
    org = next(organizations)
    readers = [start(feed, org, key, await last_id(plane, org)) for key in range(5)]
    await asyncio.sleep(0.05)
    feed.end_streams()
    async with asyncio.timeout(2):
        for reader in readers:
            await reader.ended.wait()
    assert feed.streams() == 0
    with pytest.raises(BackendUnavailable):
        feed.join(org, 1)
    await feed.close()
