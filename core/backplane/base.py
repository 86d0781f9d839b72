"""What the features need from the backplane, whichever one runs: the interface, and the
broadcast handlers both implementations share.

Names given to the backplane (channels, keys, streams) are the feature's own; the backplane
keeps them apart from other users of the same Redis (`REDIS_PREFIX`). A reply list's address is
made by the backplane (`new_reply_list`) and used as it is by whoever answers.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from core.ratelimits import Bucket, Verdict

logger = logging.getLogger(__name__)

Handler = Callable[[str], None]
Entries = list[tuple[str, bytes]]  # a stream's (id, payload) entries, oldest first
NO_ENTRY = "0-0"  # the id before every stream entry


def entry_position(entry_id: str) -> tuple[int, int]:
    """`1700000000000-3` as (1700000000000, 3); a missing sequence is 0, as Redis reads it."""
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)


class Stream(ABC):
    """An append-only log, capped near `maxlen` entries, read back after an entry id.

    Ids are `<milliseconds>-<sequence>`, increasing, as Redis Streams make them.
    """

    @abstractmethod
    def append(self, payload: bytes) -> None:
        """Append one entry without waiting (on Redis it goes out with the loop's next write)."""

    @abstractmethod
    async def read(self, after: str, block: float, count: int = 500) -> list[tuple[str, bytes]]:
        """Up to `count` entries after the id `after`, oldest first; if there are none yet,
        wait up to `block` seconds for one (an empty list then)."""

    @abstractmethod
    async def last_id(self) -> str:
        """The newest entry's id, or `NO_ENTRY`."""


class Backplane(ABC):
    """Messages, claims, replies and streams between the workers that serve Mortar."""

    # Its name in /readyz, and whether it reaches other processes: when it doesn't, nothing
    # another process does (`manage.py revokekey`, say) can be announced to this one.
    name: ClassVar[str]
    shared: ClassVar[bool]

    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {}
        self._on_subscribed: list[Callable[[], None]] = []

    # --- broadcast: every worker's handlers

    def on(self, channel: str, handler: Handler) -> None:
        """Call `handler(message)` for every message published on `channel`."""
        self._handlers.setdefault(channel, []).append(handler)

    def on_subscribed(self, callback: Callable[[], None]) -> None:
        """Call `callback()` each time the broadcast is (re)subscribed: whatever was published
        while it was not — a revocation, say — was missed, and what was kept on its account
        must be forgotten."""
        self._on_subscribed.append(callback)

    def _subscribed(self) -> None:
        for callback in self._on_subscribed:
            try:
                callback()
            except Exception:
                logger.exception("backplane: a subscription callback failed")

    @abstractmethod
    def listen(self) -> None:
        """Start listening in the background, if not already (a lost connection is retried
        there until the backplane closes)."""

    @abstractmethod
    def listening(self) -> bool:
        """Whether messages published now are heard (false while Redis is out of reach)."""

    @abstractmethod
    async def start(self) -> None:
        """Listen, and connect; return once messages published from now on are heard, or raise
        `BackendUnavailable` (listening goes on in the background)."""

    @abstractmethod
    async def close(self) -> None:
        """Stop listening (a loop that ends must not be counted as a listener) and let go of
        connections, after writing what is queued."""

    @abstractmethod
    async def publish(self, channel: str, message: str) -> int:
        """Deliver `message` to every listening worker's handlers; return how many heard it."""

    def _deliver(self, channel: str, message: str) -> None:
        for handler in self._handlers.get(channel, ()):
            try:
                handler(message)
            except Exception:
                logger.exception("backplane: the handler for %s failed", channel)

    # --- reply lists: answers to one request, from whoever heard it

    @abstractmethod
    def new_reply_list(self) -> str:
        """The address of a new, empty reply list, to send along with a request."""

    @abstractmethod
    def push_reply(self, address: str, reply: bytes, ttl: int) -> None:
        """Add a reply to the list, without waiting; it is written before this returns. The
        list expires `ttl` seconds later if nobody deletes it."""

    @abstractmethod
    async def pop_reply(self, address: str, wait: float) -> bytes | None:
        """The list's oldest reply, waiting up to `wait` seconds for one (None then)."""

    @abstractmethod
    async def drop_reply_list(self, address: str) -> None:
        """Delete the list (its asker is done with it)."""

    # --- keys with a time to live

    @abstractmethod
    async def set_if_absent(self, key: str, value: bytes, ttl: int) -> bool:
        """Set the key unless it is set; True if this call set it."""

    @abstractmethod
    async def set(self, key: str, value: bytes, ttl: int) -> None:
        """Set the key, for `ttl` seconds."""

    @abstractmethod
    async def get(self, key: str) -> bytes | None:
        """The key's value, or None."""

    @abstractmethod
    async def delete_if_equal(self, key: str, value: bytes) -> bool:
        """Delete the key if it still holds `value` (a claim released by its holder only)."""

    # --- rate limits (GCRA buckets, `core/ratelimits.py`)

    @abstractmethod
    async def rate_admit(self, buckets: Sequence[Bucket]) -> Verdict | None:
        """Take each bucket's cost if every one has room, atomically across the workers that
        share this backplane; None when the limiter cannot be reached (the caller admits)."""

    @abstractmethod
    def rate_count(self, buckets: Sequence[Bucket]) -> None:
        """Add each bucket's cost (negative gives back) without asking and without waiting."""

    # --- streams, and writes nobody waits for

    @abstractmethod
    def stream(self, name: str, maxlen: int) -> Stream:
        """The stream called `name`, capped near `maxlen` entries."""

    @abstractmethod
    async def read_streams(
        self, after: Mapping[str, str], block: float, count: int = 500
    ) -> dict[str, Entries]:
        """Read several streams at once: up to `count` entries of each stream named in `after`
        after its id there, waiting up to `block` seconds for one if there are none (an empty
        dict then). One reader, however many streams: this worker's telemetry subscribers are
        served by one call at a time (`telemetry/feed.py`), cancelled to change the streams."""

    @abstractmethod
    def send_now(self) -> None:
        """Hand what is queued to the network now rather than at the end of the loop's pass."""

    @abstractmethod
    async def barrier(self) -> None:
        """Return once everything sent before is done; raise if it cannot be."""

    @abstractmethod
    def if_group_has_members(self, layer: Any, group: str, then: Callable[[], None]) -> None:
        """Call `then()` if the channel layer's group has members (or if that cannot be told),
        without waiting: the group's size is asked along with the next write."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise unless the backplane answers (readiness)."""
