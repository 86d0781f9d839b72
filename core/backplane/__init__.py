"""The backplane: what the workers serving Mortar share — broadcast messages, claims, reply
lists, streams — in Redis when `REDIS_URL` is set, in this process's memory otherwise.

The choice is made once, here, from the settings; each event loop gets its own instance
(`backplane()`, a `PerLoop`). The features (stop, dedupe, lookups, live telemetry, readiness)
are written once over the `Backplane` interface (`base.py`), and the `redis` library stays
inside this package.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from core.backplane.base import NO_ENTRY, Backplane, Entries, Handler, Stream, entry_position
from core.backplane.memory import MemoryBackplane
from core.loops import PerLoop

__all__ = [
    "NO_ENTRY",
    "Backplane",
    "Entries",
    "Handler",
    "Stream",
    "backplane",
    "entry_position",
    "out_of_reach",
    "publish_from_sync",
]


@dataclass(frozen=True)
class _Choice:
    make: Callable[[], Backplane]
    publish_from_sync: Callable[[str, str], None]


@functools.cache
def _choice() -> _Choice:
    url, prefix = settings.REDIS_URL, settings.REDIS_PREFIX
    if url:
        from core.backplane import redis

        return _Choice(
            make=lambda: redis.RedisBackplane(url, prefix),
            publish_from_sync=lambda channel, message: redis.publish_from_sync(
                url, prefix, channel, message
            ),
        )
    return _Choice(make=MemoryBackplane, publish_from_sync=_publish_in_this_process)


def _publish_in_this_process(channel: str, message: str) -> None:
    for instance in backplane.instances():
        assert isinstance(instance, MemoryBackplane)
        instance.publish_threadsafe(channel, message)


# This event loop's backplane (made on first use).
backplane: PerLoop[Backplane] = PerLoop(lambda: _choice().make())


def publish_from_sync(channel: str, message: str) -> None:
    """Publish from synchronous code (signals, management commands) to every worker it can
    reach: all of them on Redis, this process's event loops in memory."""
    _choice().publish_from_sync(channel, message)


def out_of_reach(error: BaseException) -> bool:
    """Whether the error is the backplane's Redis out of reach (refused, cut, not answering),
    as redis-py or Mortar's own `BackendUnavailable` says it."""
    from core.backplane.redis import UNREACHABLE
    from core.errors import BackendUnavailable

    return isinstance(error, (*UNREACHABLE, BackendUnavailable))
