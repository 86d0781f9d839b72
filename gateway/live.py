"""Generations in flight, across worker processes, and the Stop button behind them.

Each running generation is registered under its completion id with its organization — in
Redis when configured (`{prefix}:live:{id}`, written on the pipelined connection without waiting
for the answer: see `register`), else in this process. A stop request removes the
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
from gateway.pipelined import pack, pipelined_connection

ENTRY_SECONDS = 6 * 3600  # an entry outlives any generation; a crashed worker's expires
STOP_CHANNEL = "stop"
STOP_RECHECK_SECONDS = 0.005
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
        """Listen for stops from the start, so the first one is as quick as any; connect."""
        await self._broadcast.start()
        if settings.REDIS_URL:
            await pipelined_connection().barrier()

    async def register(self, run_id: str, organization_id: int) -> asyncio.Event:
        """Register a starting generation; return the flag a stop will set.

        With Redis, the entry is handed to the kernel without waiting for Redis's answer: the
        caller sends the response headers next, and a stop can only come after a client has
        seen them, from a worker whose command reaches Redis after ours. Redis may still serve
        the two in either order when both wait in one pass of its event loop; `stop` asks again
        when it finds nothing, which by then is after ours. If the command could not be handed
        to the kernel at once (no connection yet, or Redis not keeping up), wait for Redis's
        answer instead.
        """
        flag = self._flags[run_id] = asyncio.Event()
        if settings.REDIS_URL:
            await self._broadcast.start()  # returns at once once listening
            redis = pipelined_connection()
            redis.send_packed(
                pack(b"SET", self._key(run_id), organization_id, b"EX", ENTRY_SECONDS)
            )
            if not redis.write_now():
                try:
                    await redis.barrier()
                except BaseException:
                    del self._flags[run_id]
                    raise
        else:
            self._owners[run_id] = organization_id
        return flag

    async def unregister(self, run_id: str) -> None:
        """Forget a generation that ended; a stop for it is a 404 from now on."""
        if self._flags.pop(run_id, None) is None:
            return  # already unregistered
        if settings.REDIS_URL:
            # Wait for the answer: a JSON response goes out next, and a stop sent after it must
            # find nothing (its command could otherwise be served before ours; see register).
            with contextlib.suppress(Exception):
                await pipelined_connection().call(pack(b"DEL", self._key(run_id)))
        else:
            self._owners.pop(run_id, None)

    async def stop(self, run_id: str, organization_id: int) -> bool:
        """Stop the generation if it runs for this organization; True if it was stopped."""
        if settings.REDIS_URL:
            redis, key = self._broadcast.redis(), self._key(run_id)
            removed = await redis.eval(COMPARE_AND_DELETE, 1, key, str(organization_id))
            if not removed:
                # The entry may be on its way still (see register): our first command can be
                # served before it, a second one sent after the first answer cannot.
                await asyncio.sleep(STOP_RECHECK_SECONDS)
                removed = await redis.eval(COMPARE_AND_DELETE, 1, key, str(organization_id))
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
