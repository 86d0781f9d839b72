"""Generations in flight, across worker processes, and the Stop button behind them.

Each running generation is registered under its completion id with its organization — in
Redis when configured (`{prefix}:live:{id}`), else in this process. A stop request removes the
entry if, and only if, it belongs to the caller's organization (one atomic compare-and-delete),
then announces the stop on a Redis channel every worker listens to; the worker that runs the
generation sets its stop flag within milliseconds. Whoever removes the entry first wins: a
generation that finished first answers the stop with 404, one stopped first ends as stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from django.conf import settings

logger = logging.getLogger(__name__)

ENTRY_SECONDS = 6 * 3600  # an entry outlives any generation; a crashed worker's expires
COMPARE_AND_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
"""


class LiveGenerations:
    """This process's running generations and their stop flags."""

    def __init__(self) -> None:
        self._flags: dict[str, asyncio.Event] = {}
        self._owners: dict[str, int] = {}  # the registry itself, without Redis
        self._redis = None
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    # -- Redis plumbing ------------------------------------------------------------------

    @property
    def _channel(self) -> str:
        return f"{settings.REDIS_PREFIX}:stop"

    def _key(self, run_id: str) -> str:
        return f"{settings.REDIS_PREFIX}:live:{run_id}"

    async def _connection(self):  # type: ignore[no-untyped-def]
        if self._redis is None:
            import redis.asyncio as redis

            self._redis = redis.from_url(settings.REDIS_URL)
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(self._listen())
            await asyncio.wait_for(self._listening.wait(), 5)
        return self._redis

    async def _listen(self) -> None:
        while True:
            try:
                pubsub = self._redis.pubsub()  # type: ignore[union-attr]
                await pubsub.subscribe(self._channel)
                self._listening.set()
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        flag = self._flags.get(message["data"].decode())
                        if flag is not None:
                            flag.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("stop listener lost its Redis connection; reconnecting")
                await asyncio.sleep(0.5)

    # -- the interface -------------------------------------------------------------------

    async def start(self) -> None:
        """Listen for stops from the start, so the first one is as quick as any."""
        if settings.REDIS_URL:
            await self._connection()

    async def register(self, run_id: str, organization_id: int) -> asyncio.Event:
        """Register a starting generation; return the flag a stop will set."""
        flag = self._flags[run_id] = asyncio.Event()
        if settings.REDIS_URL:
            redis = await self._connection()
            await redis.set(self._key(run_id), str(organization_id), ex=ENTRY_SECONDS)
        else:
            self._owners[run_id] = organization_id
        return flag

    async def unregister(self, run_id: str) -> None:
        self._flags.pop(run_id, None)
        if settings.REDIS_URL:
            with contextlib.suppress(Exception):
                await (await self._connection()).delete(self._key(run_id))
        else:
            self._owners.pop(run_id, None)

    async def stop(self, run_id: str, organization_id: int) -> bool:
        """Stop the generation if it runs for this organization; True if it was stopped."""
        if settings.REDIS_URL:
            redis = await self._connection()
            removed = await redis.eval(
                COMPARE_AND_DELETE, 1, self._key(run_id), str(organization_id)
            )
            if not removed:
                return False
            await redis.publish(self._channel, run_id)
            return True
        if self._owners.get(run_id) != organization_id:
            return False
        del self._owners[run_id]
        flag = self._flags.get(run_id)
        if flag is not None:
            flag.set()
        return True


_live: dict[asyncio.AbstractEventLoop, LiveGenerations] = {}


def live_generations() -> LiveGenerations:
    loop = asyncio.get_running_loop()
    live = _live.get(loop)
    if live is None:
        live = _live[loop] = LiveGenerations()
    return live
