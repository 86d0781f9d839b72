"""Watch a generation's deltas for the client: one by one, with a wake-up when nothing is ready,
a ping when the model is quiet, and a stop the moment someone presses Stop."""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from core.flags import Flag
from gateway.generation.reply import Delta, Deltas


class Signal(enum.Enum):
    PING = "ping"  # the model has been quiet for the ping interval
    STOPPED = "stopped"  # someone pressed Stop
    IDLE = "idle"  # no delta is ready: what is pending should go out now


# Batches of deltas read ahead of the client at most; past that the model's stream waits.
WATCH_QUEUE_SIZE = 64
_END = object()  # the model's stream ended


@dataclass(frozen=True)
class _Failed:
    error: Exception  # the model's stream raised this


async def watch(
    deltas: Deltas,
    *,
    ping_interval: float | None,
    stop: Flag | None,
) -> AsyncGenerator[Delta | Signal, None]:
    """Yield the deltas one by one; Signal.IDLE whenever no further delta is ready yet;
    Signal.PING after `ping_interval` quiet seconds; Signal.STOPPED (and nothing after it) as
    soon as `stop` is set, even while the model is silent.

    One task reads the model for the whole stream and hands batches over a small queue; a timer
    and the stop flag (a listener, no task) only ever add a wake-up to that queue. (A task and
    an `asyncio.wait` per delta, the obvious way to race a read against a timeout and a flag,
    cost ~30 µs a chunk.)
    """
    if ping_interval is None and stop is None:
        async for batch in deltas:
            for delta in batch:
                yield delta
            yield Signal.IDLE
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=WATCH_QUEUE_SIZE)
    last_event = loop.time()

    def wake(item: Any) -> None:
        # A full queue means the reader is not waiting: it sees the flag on its next item.
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait(item)

    async def read() -> None:
        try:
            async for batch in deltas:
                if queue.full():
                    await queue.put(batch)  # the client reads slower than the model writes
                else:
                    queue.put_nowait(batch)
        except Exception as exc:  # handed to the reader, raised there
            await queue.put(_Failed(exc))
        else:
            await queue.put(_END)

    ping_timer: asyncio.TimerHandle | None = None

    def quiet_check(interval: float) -> None:
        nonlocal ping_timer
        quiet_until = last_event + interval
        if loop.time() >= quiet_until:
            wake(Signal.PING)
            quiet_until = loop.time() + interval
        ping_timer = loop.call_at(quiet_until, quiet_check, interval)

    reader = loop.create_task(read())
    # The wake-up goes through the loop, as an event's waiter would: a stop is seen in order
    # with what was already scheduled.
    stop_listening = (
        stop.listen(lambda: loop.call_soon(wake, Signal.STOPPED)) if stop is not None else None
    )
    if ping_interval:
        ping_timer = loop.call_at(last_event + ping_interval, quiet_check, ping_interval)
    try:
        while True:
            if queue.empty():
                yield Signal.IDLE
                item = await queue.get()
            else:
                item = queue.get_nowait()
            if stop is not None and stop.is_set():
                yield Signal.STOPPED
                return
            if item is Signal.STOPPED:
                continue  # a wake-up for a flag that is not set (cannot happen; harmless)
            if item is Signal.PING:
                last_event = loop.time()
                yield Signal.PING
                continue
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            last_event = loop.time()
            for delta in item:
                yield delta
    finally:
        if ping_timer is not None:
            ping_timer.cancel()
        if stop_listening is not None:
            stop_listening()
        if not reader.done():
            reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader  # let the model's stream close before anyone else touches it
