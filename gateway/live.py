"""Generations in flight, across worker processes, and the Stop button behind them.

Each running generation is registered under its completion id with its organization — in
Redis when configured (`{prefix}:live:{id}`), else in this process. A stop request removes the
entry if, and only if, it belongs to the caller's organization (one atomic compare-and-delete),
then announces the stop to every worker (`broadcast.py`); the worker that runs the generation
sets its stop flag within milliseconds. Whoever removes the entry first wins: a generation that
finished first answers the stop with 404, one stopped first ends as stopped.
"""

from __future__ import annotations

import asyncio
import contextlib

from django.conf import settings

from gateway.broadcast import broadcast

ENTRY_SECONDS = 6 * 3600  # an entry outlives any generation; a crashed worker's expires
STOP_CHANNEL = "stop"
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
        self._broadcast = broadcast()
        self._broadcast.on(STOP_CHANNEL, self._on_stop)

    def _key(self, run_id: str) -> str:
        return f"{settings.REDIS_PREFIX}:live:{run_id}"

    def _on_stop(self, run_id: str) -> None:
        flag = self._flags.get(run_id)
        if flag is not None:
            flag.set()

    async def start(self) -> None:
        """Listen for stops from the start, so the first one is as quick as any."""
        await self._broadcast.start()

    async def register(self, run_id: str, organization_id: int) -> asyncio.Event:
        """Register a starting generation; return the flag a stop will set."""
        flag = self._flags[run_id] = asyncio.Event()
        if settings.REDIS_URL:
            await self.start()
            await self._broadcast.redis().set(
                self._key(run_id), str(organization_id), ex=ENTRY_SECONDS
            )
        else:
            self._owners[run_id] = organization_id
        return flag

    async def unregister(self, run_id: str) -> None:
        if self._flags.pop(run_id, None) is None:
            return  # already unregistered
        if settings.REDIS_URL:
            with contextlib.suppress(Exception):
                await self._broadcast.redis().delete(self._key(run_id))
        else:
            self._owners.pop(run_id, None)

    async def stop(self, run_id: str, organization_id: int) -> bool:
        """Stop the generation if it runs for this organization; True if it was stopped."""
        if settings.REDIS_URL:
            removed = await self._broadcast.redis().eval(
                COMPARE_AND_DELETE, 1, self._key(run_id), str(organization_id)
            )
        else:
            removed = self._owners.get(run_id) == organization_id
            if removed:
                del self._owners[run_id]
        if removed:
            await self._broadcast.publish(STOP_CHANNEL, run_id)
        return bool(removed)


_live: dict[asyncio.AbstractEventLoop, LiveGenerations] = {}


def live_generations() -> LiveGenerations:
    loop = asyncio.get_running_loop()
    live = _live.get(loop)
    if live is None:
        live = _live[loop] = LiveGenerations()
    return live
