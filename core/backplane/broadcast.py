"""The Redis backplane's ear: one pub/sub connection per event loop, on every broadcast channel.

Stop requests (`gateway/coordination/stop.py`), dedupe answers (`dedupe.py`) and dropped
lookups (`core/lookups.py`) are published by any worker and heard by all of them here.

The listener knows when it hears: from Redis' confirmation of the subscription until the
connection fails. It reconnects by itself (its client does not retry on its own, so no
reconnection goes unseen), and reports each (re)subscription: what was published in between
was missed, and those who cached on the strength of hearing about changes must forget.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from asyncio import FIRST_COMPLETED
from collections.abc import Callable

import redis.asyncio as redis

logger = logging.getLogger(__name__)

SUBSCRIBE_SECONDS = 5.0
RECONNECT_SECONDS = 0.5


class BroadcastListener:
    """Subscribed to every channel under `prefix`; hands each message to `deliver(name,
    message)`, `name` being the channel's name less the prefix, and calls `subscribed()` each
    time the subscription is made."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        deliver: Callable[[str, str], None],
        subscribed: Callable[[], None],
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._deliver = deliver
        self._on_subscribed = subscribed
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._failed = asyncio.Event()  # set while the last attempt failed
        self._failures = 0

    def listening(self) -> bool:
        return self._subscribed.is_set() and self._task is not None and not self._task.done()

    def listen(self) -> None:
        """Start listening in the background unless it is."""
        if self._task is None or self._task.done():
            self._subscribed.clear()
            self._failed.clear()
            self._failures = 0
            self._task = asyncio.get_running_loop().create_task(self._listen())

    async def start(self) -> bool:
        """Listen; return once subscribed, True if the subscription was made just now; raise
        ConnectionError once an attempt failed (at once while Redis is known to be out of
        reach), TimeoutError after SUBSCRIBE_SECONDS. The listener goes on trying."""
        if self.listening():
            return False
        self.listen()
        if self._failures:
            raise ConnectionError("Redis is out of reach")
        subscribed = asyncio.ensure_future(self._subscribed.wait())
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait(
                {subscribed, failed}, timeout=SUBSCRIBE_SECONDS, return_when=FIRST_COMPLETED
            )
        finally:
            subscribed.cancel()
            failed.cancel()
        if self._subscribed.is_set():
            return True
        if self._failed.is_set():
            raise ConnectionError("Redis is out of reach")
        raise TimeoutError("the broadcast's subscription was not confirmed in time")

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
                    async for message in pubsub.listen():
                        kind = message.get("type")
                        if kind == "pmessage":
                            channel = message["channel"][skip:].decode()
                            self._deliver(channel, message["data"].decode())
                        elif kind == "psubscribe":
                            # Redis confirms: what is published from now on is heard.
                            self._heard()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._lost(error)
                await asyncio.sleep(RECONNECT_SECONDS)

    def _heard(self) -> None:
        if self._failures:
            logger.warning("backplane: the broadcast's Redis connection is back")
        self._failures = 0
        self._failed.clear()
        self._subscribed.set()
        self._on_subscribed()

    def _lost(self, error: Exception) -> None:
        self._subscribed.clear()
        self._failed.set()
        self._failures += 1
        if self._failures == 1:
            logger.warning(
                "backplane: lost the broadcast's Redis connection (%s); reconnecting", error
            )
        elif self._failures % 120 == 0:  # once a minute
            logger.warning("backplane: Redis still out of reach (%s); reconnecting", error)
