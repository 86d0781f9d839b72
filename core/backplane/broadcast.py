"""The Redis backplane's ear: one pub/sub connection per event loop, on every broadcast channel.

Stop requests (`gateway/coordination/stop.py`), dedupe answers (`dedupe.py`) and dropped
lookups (`core/lookups.py`) are published by any worker and heard by all of them here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import redis.asyncio as redis

logger = logging.getLogger(__name__)

SUBSCRIBE_SECONDS = 5.0
RECONNECT_SECONDS = 0.5


class BroadcastListener:
    """Subscribed to every channel under `prefix`; hands each message to `deliver(name,
    message)`, `name` being the channel's name less the prefix."""

    def __init__(
        self, client: redis.Redis, prefix: str, deliver: Callable[[str, str], None]
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._deliver = deliver
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    def listening(self) -> bool:
        return self._subscribed.is_set() and self._task is not None and not self._task.done()

    async def start(self) -> bool:
        """Listen; return once subscribed, True if the subscription was made just now."""
        if self.listening():
            return False
        if self._task is None or self._task.done():
            self._subscribed.clear()
            self._task = asyncio.get_running_loop().create_task(self._listen())
        await asyncio.wait_for(self._subscribed.wait(), SUBSCRIBE_SECONDS)
        return True

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._subscribed.clear()

    async def _listen(self) -> None:
        skip = len(self._prefix)
        while True:
            try:
                async with self._client.pubsub() as pubsub:  # closed on the way out
                    await pubsub.psubscribe(f"{self._prefix}*")
                    self._subscribed.set()
                    async for message in pubsub.listen():
                        if message.get("type") == "pmessage":
                            channel = message["channel"][skip:].decode()
                            self._deliver(channel, message["data"].decode())
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("backplane: lost the broadcast's Redis connection; reconnecting")
                await asyncio.sleep(RECONNECT_SECONDS)
