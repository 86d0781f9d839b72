"""Messages to every worker process: one Redis pub/sub connection per process, many channels.

Used for stop requests (`live.py`) and for dropping cached keys and models when they change
(`lookups.py`). Without Redis there is only this process, and messages are delivered in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from django.conf import settings

logger = logging.getLogger(__name__)

Handler = Callable[[str], None]


def channel_name(name: str) -> str:
    return f"{settings.REDIS_PREFIX}:broadcast:{name}"


class Broadcast:
    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {}
        self._redis = None
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    def redis(self):  # type: ignore[no-untyped-def]
        if self._redis is None:
            import redis.asyncio as redis

            self._redis = redis.from_url(settings.REDIS_URL)
        return self._redis

    def on(self, name: str, handler: Handler) -> None:
        """Call `handler(message)` for every message on the channel, from any process."""
        self._handlers.setdefault(channel_name(name), []).append(handler)

    async def start(self) -> None:
        """Listen (once per process); returns when the subscription is in place."""
        if not settings.REDIS_URL or (self._subscribed.is_set() and not self._listener.done()):
            return
        if self._listener is None or self._listener.done():
            self._subscribed.clear()
            self._listener = asyncio.get_running_loop().create_task(self._listen())
        await asyncio.wait_for(self._subscribed.wait(), 5)

    async def close(self) -> None:
        """Stop listening (a loop that ends must not stay subscribed: a stop request counts
        the listeners it waits for)."""
        if self._listener is not None and not self._listener.done():
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        self._subscribed.clear()

    async def publish(self, name: str, message: str) -> None:
        if settings.REDIS_URL:
            await self.redis().publish(channel_name(name), message)
        else:
            self._deliver(channel_name(name), message)

    def _deliver(self, channel: str, message: str) -> None:
        for handler in self._handlers.get(channel, ()):
            try:
                handler(message)
            except Exception:
                logger.exception("broadcast handler for %s failed", channel)

    async def _listen(self) -> None:
        while True:
            pubsub = self.redis().pubsub()
            try:
                await pubsub.psubscribe(channel_name("*"))
                self._subscribed.set()
                async for message in pubsub.listen():
                    if message.get("type") == "pmessage":
                        self._deliver(message["channel"].decode(), message["data"].decode())
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("broadcast lost its Redis connection; reconnecting")
                await asyncio.sleep(0.5)
            finally:
                await pubsub.aclose()


_broadcasts: dict[asyncio.AbstractEventLoop, Broadcast] = {}


def broadcast() -> Broadcast:
    loop = asyncio.get_running_loop()
    found = _broadcasts.get(loop)
    if found is None:
        found = _broadcasts[loop] = Broadcast()
    return found


def publish_from_sync(name: str, message: str) -> None:
    """Publish from synchronous code (signals, management commands)."""
    if not settings.REDIS_URL:
        return  # no other process can hold anything to tell
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.publish(channel_name(name), message)
    finally:
        client.close()
