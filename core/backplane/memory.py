"""The embedded default's backplane: this process's event loop is the only worker.

Everything lives in memory and is reached without waiting: broadcast messages go to this
loop's handlers (on its next pass, as a message from Redis would), keys and reply lists expire
like Redis keys, and streams are ring buffers with Redis-style ids.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from channels.layers import InMemoryChannelLayer

from core.backplane.base import NO_ENTRY, Backplane, Entries, Stream, entry_position
from core.ids import new_hex_id
from core.ratelimits import Bucket, GcraBuckets, Verdict

SWEEP_SECONDS = 10.0  # how often expired keys and reply lists are looked for

# The rate limiter is the process's, not the event loop's: every loop of the one process (the
# server's, and those sync code starts) counts against the same buckets.
_rate_buckets = GcraBuckets()
_rate_lock = threading.Lock()


class _Waiters:
    """Futures waiting for something to arrive, woken all at once."""

    def __init__(self) -> None:
        self._waiting: list[asyncio.Future[None]] = []

    async def wait(self, seconds: float) -> bool:
        """Wait until `wake()`, `seconds` at most; True if woken."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await asyncio.wait_for(waiter, seconds)
            return True
        except TimeoutError:
            return False
        finally:
            if waiter in self._waiting:
                self._waiting.remove(waiter)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def wake(self) -> None:
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)


class MemoryStream(Stream):
    """A ring buffer of the last `maxlen` entries."""

    def __init__(self, maxlen: int, appended_anywhere: _Waiters | None = None) -> None:
        self._appended_anywhere = appended_anywhere
        self._entries: collections.deque[tuple[tuple[int, int], str, bytes]] = collections.deque(
            maxlen=maxlen
        )
        self._last = (0, 0)
        self._appended = _Waiters()

    def append(self, payload: bytes) -> None:
        now_ms = time.time_ns() // 1_000_000
        last_ms, last_seq = self._last
        position = self._last = (now_ms, 0) if now_ms > last_ms else (last_ms, last_seq + 1)
        self._entries.append((position, f"{position[0]}-{position[1]}", payload))
        self._appended.wake()
        if self._appended_anywhere:
            self._appended_anywhere.wake()

    async def read(self, after: str, block: float, count: int = 500) -> list[tuple[str, bytes]]:
        position = entry_position(after)
        found = self.after(position, count)
        if not found and block > 0 and await self._appended.wait(block):
            found = self.after(position, count)
        return found

    def after(self, position: tuple[int, int], count: int) -> list[tuple[str, bytes]]:
        # Readers mostly follow the newest entries: walk back from the end.
        newer = []
        for entry_position_, entry_id, payload in reversed(self._entries):
            if entry_position_ <= position:
                break
            newer.append((entry_id, payload))
        newer.reverse()
        return newer[:count]

    async def last_id(self) -> str:
        return self._entries[-1][1] if self._entries else NO_ENTRY


class MemoryBackplane(Backplane):
    """This event loop's backplane when there is no Redis."""

    name = "memory"
    shared = False

    def __init__(self) -> None:
        super().__init__()
        self._loop = asyncio.get_running_loop()
        self._keys: dict[str, tuple[bytes, float]] = {}  # value, expiry (monotonic)
        self._reply_lists: dict[str, tuple[collections.deque[bytes], float]] = {}
        self._replied: dict[str, _Waiters] = {}
        self._streams: dict[str, MemoryStream] = {}
        self._appended = _Waiters()  # woken by an append to any stream
        self._next_sweep = time.monotonic() + SWEEP_SECONDS

    # --- broadcast

    def listen(self) -> None:
        return None

    def listening(self) -> bool:
        return True  # every message is delivered in this process

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def publish(self, channel: str, message: str) -> int:
        self._loop.call_soon(self._deliver, channel, message)
        return 1 if self._handlers.get(channel) else 0

    def publish_threadsafe(self, channel: str, message: str) -> None:
        """Publish from another thread (synchronous code: signals, management commands)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
            self._loop.call_soon_threadsafe(self._deliver, channel, message)

    # --- reply lists

    def new_reply_list(self) -> str:
        return f"replies:{new_hex_id()}"

    def push_reply(self, address: str, reply: bytes, ttl: int) -> None:
        self._sweep()
        entry = self._reply_lists.get(address)
        replies = entry[0] if entry is not None else collections.deque()
        replies.append(reply)
        self._reply_lists[address] = (replies, time.monotonic() + ttl)
        waiters = self._replied.get(address)
        if waiters is not None:
            waiters.wake()

    async def pop_reply(self, address: str, wait: float) -> bytes | None:
        deadline = time.monotonic() + wait
        while True:
            entry = self._reply_lists.get(address)
            if entry is not None and entry[0] and entry[1] > time.monotonic():
                return entry[0].popleft()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            waiters = self._replied.setdefault(address, _Waiters())
            try:
                await waiters.wait(left)
            finally:
                if not waiters:
                    self._replied.pop(address, None)

    async def drop_reply_list(self, address: str) -> None:
        self._reply_lists.pop(address, None)

    # --- keys

    async def set_if_absent(self, key: str, value: bytes, ttl: int) -> bool:
        if self._live(key) is not None:
            return False
        await self.set(key, value, ttl)
        return True

    async def set(self, key: str, value: bytes, ttl: int) -> None:
        self._sweep()
        self._keys[key] = (value, time.monotonic() + ttl)

    async def get(self, key: str) -> bytes | None:
        return self._live(key)

    async def delete_if_equal(self, key: str, value: bytes) -> bool:
        if self._live(key) != value:
            return False
        del self._keys[key]
        return True

    def _live(self, key: str) -> bytes | None:
        entry = self._keys.get(key)
        if entry is None:
            return None
        if entry[1] <= time.monotonic():
            del self._keys[key]
            return None
        return entry[0]

    def _sweep(self) -> None:
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_SECONDS
        for key in [key for key, (_, expiry) in self._keys.items() if expiry <= now]:
            del self._keys[key]
        for key in [key for key, (_, expiry) in self._reply_lists.items() if expiry <= now]:
            del self._reply_lists[key]

    # --- streams and writes nobody waits for

    def stream(self, name: str, maxlen: int) -> MemoryStream:
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = MemoryStream(maxlen, self._appended)
        return stream

    async def read_streams(
        self, after: Mapping[str, str], block: float, count: int = 500
    ) -> dict[str, Entries]:
        found = self._after(after, count)
        if not found and block > 0 and await self._appended.wait(block):
            found = self._after(after, count)
        return found

    def _after(self, after: Mapping[str, str], count: int) -> dict[str, Entries]:
        found = {}
        for name, entry_id in after.items():
            stream = self._streams.get(name)
            entries = stream.after(entry_position(entry_id), count) if stream else []
            if entries:
                found[name] = entries
        return found

    def send_now(self) -> None:
        return None  # nothing is queued: it is all done already

    async def barrier(self) -> None:
        return None

    def if_group_has_members(self, layer: Any, group: str, then: Callable[[], None]) -> None:
        if isinstance(layer, InMemoryChannelLayer) and not layer.groups.get(group):
            return
        then()

    # --- rate limits

    async def rate_admit(self, buckets: Sequence[Bucket]) -> Verdict:
        with _rate_lock:
            return _rate_buckets.admit(buckets, time.monotonic() * 1000)

    def rate_count(self, buckets: Sequence[Bucket]) -> None:
        with _rate_lock:
            _rate_buckets.count(buckets, time.monotonic() * 1000)

    async def ping(self) -> None:
        return None
