"""The backplane's primitives, on both implementations: the memory one (this process) and the
Redis one (every worker; the real Redis, under a prefix of this test module's own)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
import redis
from channels.layers import InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from core.backplane import NO_ENTRY, Backplane, memory
from core.backplane import redis as redis_backplane
from core.backplane.memory import MemoryBackplane
from core.backplane.redis import RedisBackplane
from core.ids import new_hex_id

PREFIX = f"{settings.REDIS_PREFIX}-backplane-test"  # no server process of the suite hears it
REDIS_URL = settings.REDIS_URL or "redis://127.0.0.1:6379/0"


@pytest.fixture
async def plane(make_plane: Callable[[], Backplane]) -> Backplane:
    return make_plane()  # made in the test's event loop, as PerLoop would


def name(kind: str) -> str:
    return f"{kind}-{new_hex_id()}"


class Heard:
    """A handler that keeps what it heard, and lets a test wait for it."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._arrived = asyncio.Event()

    def __call__(self, message: str) -> None:
        self.messages.append(message)
        self._arrived.set()

    async def first(self, count: int, within: float = 5.0) -> list[str]:
        """The first `count` messages, once they have arrived."""
        async with asyncio.timeout(within):
            while len(self.messages) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.messages[:count]


# --- broadcast


async def test_a_message_reaches_every_worker_the_backplane_reaches(
    make_plane: Callable[[], Backplane],
) -> None:
    here, there = make_plane(), make_plane()
    heard_here, heard_there = Heard(), Heard()
    channel = name("channel")
    here.on(channel, heard_here)
    there.on(channel, heard_there)
    await here.start()
    await there.start()

    listeners = await here.publish(channel, "hello")
    assert await heard_here.first(1) == ["hello"]
    if here.shared:  # Redis: the other worker heard it too, and was counted
        assert await heard_there.first(1) == ["hello"]
        assert listeners == 2
    else:  # memory: this process only
        await here.barrier()
        assert listeners == 1
        assert heard_there.messages == []


async def test_a_worker_that_closed_is_no_longer_counted(
    make_plane: Callable[[], Backplane],
) -> None:
    here, there = make_plane(), make_plane()
    channel = name("channel")
    heard = Heard()
    here.on(channel, heard)
    there.on(channel, heard)
    await here.start()
    await there.start()
    await there.close()
    assert await here.publish(channel, "after") == 1
    assert await heard.first(1) == ["after"]
    await here.publish(channel, "again")  # had `there` heard "after", this would be second
    assert await heard.first(2) == ["after", "again"]


async def test_a_channel_nobody_handles_is_heard_by_no_handler(plane: Backplane) -> None:
    heard = Heard()
    plane.on(name("channel"), heard)
    await plane.start()
    listeners = await plane.publish(name("other"), "lost")
    assert listeners == (1 if plane.shared else 0)  # Redis counts the listening worker
    await plane.barrier()
    assert heard.messages == []


async def test_a_failing_handler_does_not_keep_the_message_from_the_others(
    plane: Backplane, caplog: pytest.LogCaptureFixture
) -> None:
    channel = name("channel")
    heard = Heard()

    def fails(message: str) -> None:
        raise RuntimeError("handler bug")

    plane.on(channel, fails)
    plane.on(channel, heard)
    await plane.start()
    with caplog.at_level(logging.ERROR):
        await plane.publish(channel, "one")
        await plane.publish(channel, "two")
        assert await heard.first(2) == ["one", "two"]
    assert "handler bug" in caplog.text


async def test_synchronous_code_publishes_to_the_loop_s_handlers(plane: Backplane) -> None:
    channel = name("channel")
    heard = Heard()
    plane.on(channel, heard)
    await plane.start()
    if isinstance(plane, MemoryBackplane):
        await asyncio.to_thread(plane.publish_threadsafe, channel, "from a thread")
    else:
        await asyncio.to_thread(
            redis_backplane.publish_from_sync, REDIS_URL, PREFIX, channel, "from a thread"
        )
    assert await heard.first(1) == ["from a thread"]


# --- reply lists


async def test_replies_are_popped_in_the_order_they_were_pushed(plane: Backplane) -> None:
    address = plane.new_reply_list()
    plane.push_reply(address, b"1", 30)
    plane.push_reply(address, b"0", 30)
    assert await plane.pop_reply(address, 1) == b"1"
    assert await plane.pop_reply(address, 1) == b"0"


async def test_a_pop_waits_for_a_reply_pushed_later(plane: Backplane) -> None:
    address = plane.new_reply_list()
    await plane.start()
    popping = asyncio.create_task(plane.pop_reply(address, 5))
    await asyncio.sleep(0)  # the pop is waiting
    assert not popping.done()
    plane.push_reply(address, b"late", 30)
    assert await popping == b"late"


async def test_a_pop_without_a_reply_gives_up(plane: Backplane) -> None:
    address = plane.new_reply_list()
    assert await plane.pop_reply(address, 0.1) is None


async def test_a_dropped_reply_list_has_no_replies(plane: Backplane) -> None:
    address = plane.new_reply_list()
    plane.push_reply(address, b"1", 30)
    await plane.barrier()
    await plane.drop_reply_list(address)
    assert await plane.pop_reply(address, 0.1) is None


# --- keys


async def test_a_key_is_set_only_if_absent(plane: Backplane) -> None:
    key = name("claim")
    assert await plane.set_if_absent(key, b"first", 60) is True
    assert await plane.set_if_absent(key, b"second", 60) is False
    assert await plane.get(key) == b"first"
    assert await plane.get(name("never-set")) is None


async def test_a_key_is_deleted_only_by_its_value(plane: Backplane) -> None:
    key = name("claim")
    await plane.set(key, b"mine", 60)
    assert await plane.delete_if_equal(key, b"theirs") is False
    assert await plane.get(key) == b"mine"
    assert await plane.delete_if_equal(key, b"mine") is True
    assert await plane.get(key) is None
    assert await plane.set_if_absent(key, b"next", 60) is True  # free again


async def test_set_replaces_a_value(plane: Backplane) -> None:
    key = name("answer")
    await plane.set(key, b"one", 60)
    await plane.set(key, b"two", 60)
    assert await plane.get(key) == b"two"


@pytest.mark.redis
async def test_redis_keys_and_reply_lists_carry_their_time_to_live() -> None:
    plane = RedisBackplane(REDIS_URL, PREFIX)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        key = name("claim")
        await plane.set_if_absent(key, b"v", 900)
        assert 890 < client.ttl(f"{PREFIX}:{key}") <= 900
        address = plane.new_reply_list()
        assert address.startswith(f"{PREFIX}:")
        plane.push_reply(address, b"1", 30)
        await plane.barrier()
        assert 20 < client.ttl(address) <= 30
    finally:
        client.close()
        await plane.close()


async def test_memory_keys_and_reply_lists_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    plane = MemoryBackplane()
    now = [1000.0]
    monkeypatch.setattr(memory.time, "monotonic", lambda: now[0])
    await plane.set("claim", b"v", 60)
    address = plane.new_reply_list()
    plane.push_reply(address, b"1", 30)
    now[0] += 31
    assert await plane.get("claim") == b"v"
    assert await plane.pop_reply(address, 0) is None  # expired
    now[0] += 30
    assert await plane.get("claim") is None
    assert await plane.set_if_absent("claim", b"again", 60) is True


# --- streams


def position(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


async def test_a_stream_is_read_back_after_an_id_in_order(plane: Backplane) -> None:
    stream = plane.stream(name("stream"), 100)
    assert await stream.last_id() == NO_ENTRY
    for n in range(5):
        stream.append(b"entry %d" % n)
    await plane.barrier()

    entries = await stream.read(NO_ENTRY, 0)
    assert [payload for _, payload in entries] == [b"entry %d" % n for n in range(5)]
    ids = [entry_id for entry_id, _ in entries]
    assert [position(i) for i in ids] == sorted(position(i) for i in ids)
    assert len(set(ids)) == 5
    assert await stream.last_id() == ids[-1]
    assert [p for _, p in await stream.read(ids[1], 0)] == [b"entry 2", b"entry 3", b"entry 4"]
    assert [p for _, p in await stream.read(NO_ENTRY, 0, count=2)] == [b"entry 0", b"entry 1"]
    assert await stream.read(ids[-1], 0) == []
    # An id without its sequence number is the millisecond's first.
    assert len(await stream.read(str(position(ids[0])[0] - 1), 0)) == 5


async def test_a_read_waits_for_an_entry_appended_later(plane: Backplane) -> None:
    stream = plane.stream(name("stream"), 100)
    reading = asyncio.create_task(stream.read(NO_ENTRY, 5))
    await asyncio.sleep(0.05)  # the read is waiting
    assert not reading.done()
    stream.append(b"late")
    assert [payload for _, payload in await reading] == [b"late"]


async def test_a_read_with_nothing_new_gives_up(plane: Backplane) -> None:
    stream = plane.stream(name("stream"), 100)
    stream.append(b"old")
    await plane.barrier()
    assert await stream.read(await stream.last_id(), 0.1) == []


async def test_a_stream_keeps_about_its_last_maxlen_entries(plane: Backplane) -> None:
    stream = plane.stream(name("stream"), 100)
    for n in range(1000):
        stream.append(b"%d" % n)
    await plane.barrier()
    kept = await stream.read(NO_ENTRY, 0, count=10_000)
    # Exactly 100 in memory; Redis trims whole nodes (`MAXLEN ~`), so a few more.
    assert 100 <= len(kept) <= 200
    assert kept[-1][1] == b"999"
    assert [int(p) for _, p in kept] == list(range(1000 - len(kept), 1000))


async def test_one_worker_reads_what_another_appended(make_plane) -> None:  # type: ignore[no-untyped-def]
    writer, reader = make_plane(), make_plane()
    stream_name = name("stream")
    writer.stream(stream_name, 100).append(b"shared?")
    await writer.barrier()
    entries = await reader.stream(stream_name, 100).read(NO_ENTRY, 0.1)
    assert [p for _, p in entries] == ([b"shared?"] if writer.shared else [])


async def test_one_read_of_several_streams_returns_each_one_s_new_entries(
    plane: Backplane,
) -> None:
    one, two, quiet = name("stream"), name("stream"), name("stream")
    plane.stream(one, 100).append(b"old")
    await plane.barrier()
    after_old = await plane.stream(one, 100).last_id()
    plane.stream(one, 100).append(b"one")
    plane.stream(two, 100).append(b"two")
    await plane.barrier()

    found = await plane.read_streams({one: after_old, two: NO_ENTRY, quiet: NO_ENTRY}, 0)
    assert {stream: [p for _, p in entries] for stream, entries in found.items()} == {
        one: [b"one"],
        two: [b"two"],
    }
    assert await plane.read_streams({one: found[one][-1][0], two: found[two][-1][0]}, 0.1) == {}


async def test_a_read_of_several_streams_waits_for_an_append_to_any(plane: Backplane) -> None:
    one, two = name("stream"), name("stream")
    reading = asyncio.create_task(plane.read_streams({one: NO_ENTRY, two: NO_ENTRY}, 5))
    await asyncio.sleep(0.05)  # the read is waiting
    assert not reading.done()
    plane.stream(two, 100).append(b"late")
    found = await reading
    assert list(found) == [two]
    assert [p for _, p in found[two]] == [b"late"]


async def test_a_cancelled_read_of_several_streams_leaves_the_backplane_usable(
    plane: Backplane,
) -> None:
    stream = name("stream")
    reading = asyncio.create_task(plane.read_streams({stream: NO_ENTRY}, 5))
    await asyncio.sleep(0.05)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    plane.stream(stream, 100).append(b"after")
    await plane.barrier()
    found = await plane.read_streams({stream: NO_ENTRY}, 1)
    assert [p for _, p in found[stream]] == [b"after"]


# --- the dashboard's group, readiness


async def test_the_group_callback_runs_only_while_the_group_has_members(plane: Backplane) -> None:
    if isinstance(plane, MemoryBackplane):
        layer: InMemoryChannelLayer | RedisChannelLayer = InMemoryChannelLayer()
    else:
        layer = RedisChannelLayer(hosts=[REDIS_URL], prefix=f"{PREFIX}:asgi")
    group = name("group")
    calls: list[str] = []

    plane.if_group_has_members(layer, group, lambda: calls.append("empty"))
    await plane.barrier()
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    try:
        plane.if_group_has_members(layer, group, lambda: calls.append("member"))
        await plane.barrier()
    finally:
        await layer.group_discard(group, channel)
    assert calls == ["member"]


async def test_a_group_the_backplane_cannot_count_gets_everything(plane: Backplane) -> None:
    calls: list[str] = []
    plane.if_group_has_members(object(), name("group"), lambda: calls.append("sent"))
    await plane.barrier()
    assert calls == ["sent"]


async def test_a_backplane_that_answers_is_ready(plane: Backplane) -> None:
    await plane.ping()


@pytest.mark.redis
async def test_a_redis_nobody_answers_is_not_ready() -> None:
    plane = RedisBackplane("redis://127.0.0.1:1/0", PREFIX)  # nothing listens on port 1
    try:
        with pytest.raises((ConnectionError, OSError, TimeoutError, redis.RedisError)):
            await plane.ping()
    finally:
        await plane._client.aclose()
