"""Watch a generation's deltas for the client: one by one, with a wake-up when nothing is ready,
a ping when the model is quiet, and a stop the moment someone presses Stop."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import types
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator
from typing import Any

from core.flags import Flag
from gateway.generation.reply import Delta, Deltas


class Signal(enum.Enum):
    PING = "ping"  # the model has been quiet for the ping interval
    STOPPED = "stopped"  # someone pressed Stop
    IDLE = "idle"  # no delta is ready: what is pending should go out now


async def watch(
    deltas: Deltas,
    *,
    ping_interval: float | None,
    stop: Flag | None,
) -> AsyncGenerator[Delta | Signal, None]:
    """Yield the deltas one by one; Signal.IDLE whenever the next batch is not ready yet;
    Signal.PING after `ping_interval` quiet seconds; Signal.STOPPED (and nothing after it) as
    soon as `stop` is set, even while the model is silent.

    The model's stream is read in the consumer's own task, one batch at a time (nothing is read
    ahead of the client), by stepping each pending read by hand: while it waits, the task waits
    on one future that the read, the ping timer or the stop flag's listener completes. (A task
    and an `asyncio.wait` per delta, the obvious way to race a read against a timeout and a
    flag, cost ~30 µs a chunk; a reader task per stream feeding a queue, two task wake-ups and
    the queue's futures.)
    """
    if ping_interval is None and stop is None:
        async for batch in deltas:
            for delta in batch:
                yield delta
            yield Signal.IDLE
        return
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] | None = None  # what the task waits on while the read does

    def wake(*_: object) -> None:
        if woken is not None and not woken.done():
            woken.set_result(None)

    quiet = _QuietTimer(loop, ping_interval, wake) if ping_interval else None
    stop_listening = stop.listen(wake) if stop is not None else None
    read: _Read | None = None
    try:
        while True:
            if stop is not None and stop.is_set():
                yield Signal.STOPPED
                return
            if quiet is not None and quiet.due:
                quiet.due = False
                quiet.last_event = loop.time()
                yield Signal.PING
                continue
            if read is None:
                read = _Read(deltas)
            elif not read.can_go_on():
                woken = loop.create_future()
                await read.wait(woken, wake)
                continue
            got = read.go_on()  # at the end of the stream: StopAsyncIteration, out of here
            if got is None:
                yield Signal.IDLE
                continue
            read = None
            if quiet is not None:
                quiet.last_event = loop.time()
            for delta in got:
                yield delta
    except StopAsyncIteration:
        return  # the model's stream ended
    finally:
        if quiet is not None:
            quiet.cancel()
        if stop_listening is not None:
            stop_listening()
        if read is not None and read.started and read.pending:
            # Cancelled where it waits, as its own task would be; the model's stream closes.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await read.to_the_end(asyncio.CancelledError())


class _QuietTimer:
    """Notes when the model has been quiet for `interval` seconds since `last_event` (`due`),
    and wakes the watcher: one timer, re-armed when it fires, not on every event."""

    __slots__ = ("_handle", "_interval", "_loop", "_wake", "due", "last_event")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, interval: float, wake: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._interval = interval
        self._wake = wake
        self.due = False
        self.last_event = loop.time()
        self._handle: asyncio.TimerHandle | None = loop.call_at(
            self.last_event + interval, self._check
        )

    def _check(self) -> None:
        quiet_until = self.last_event + self._interval
        if self._loop.time() >= quiet_until:
            self.due = True
            self._wake()
            quiet_until = self._loop.time() + self._interval
        self._handle = self._loop.call_at(quiet_until, self._check)

    def cancel(self) -> None:
        # The timer holds this object (its callback is a method of it), and this object the
        # timer: a reference cycle, with `wake` and the last future waited on, that the garbage
        # collector would have to free. Let go of the timer, and it is all freed now.
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class _Read:
    """One `anext()` of the model's stream, stepped by hand in the consumer's task, as a task
    steps a coroutine: it runs until it waits on a future, and goes on when that is done."""

    __slots__ = ("_step", "pending", "started", "waiting_on", "yielded")

    def __init__(self, deltas: Deltas) -> None:
        self._step: Coroutine[Any, Any, list[Delta]] = deltas.__anext__()
        self.started = False
        self.pending = True  # started and not finished: it must be ended before the stream
        self.waiting_on: asyncio.Future[Any] | None = None
        self.yielded = False  # it gave the loop one pass (a bare `yield`), and waits for that

    def can_go_on(self) -> bool:
        if self.waiting_on is None:
            return not self.yielded
        return self.waiting_on.done()

    def go_on(self) -> list[Delta] | None:
        """Run the read until it has its batch, or None while it waits."""
        self.started = True
        try:
            self.waiting_on = self._step.send(None)
        except StopIteration as done:
            self.pending = False
            return done.value  # type: ignore[no-any-return]
        except BaseException:
            self.pending = False
            raise
        self.yielded = self.waiting_on is None
        return None

    async def wait(self, woken: asyncio.Future[None], wake: Callable[..., None]) -> None:
        """Wait until what the read waits on is done, or someone completes `woken`.

        A cancellation of the task goes to the read, where it would have gone had the read been
        awaited directly (a timeout inside it, the client leaving), and the read ends."""
        waiting_on = self.waiting_on
        if waiting_on is None:
            await asyncio.sleep(0)  # the loop pass the read asked for
            self.yielded = False
            return
        waiting_on.add_done_callback(wake)
        try:
            await woken
        except BaseException as exc:
            waiting_on.remove_done_callback(wake)
            with contextlib.suppress(StopAsyncIteration):  # it ended instead: `exc` goes on
                await self.to_the_end(exc)
            raise
        if not waiting_on.done():
            waiting_on.remove_done_callback(wake)

    @types.coroutine
    def to_the_end(self, error: BaseException) -> Generator[Any, Any, None]:
        """Throw `error` into the read where it waits, and let it finish in this task, every
        future it waits on from now on waited on by the task itself; raise what it raises."""
        if self.waiting_on is not None:
            self.waiting_on.cancel()  # as a cancelled task cancels what it waits on
        throw: BaseException | None = error
        try:
            while True:
                try:
                    if throw is not None:
                        waiting_on = self._step.throw(throw)
                    else:
                        waiting_on = self._step.send(None)
                except StopIteration:
                    return
                throw = None
                try:
                    yield waiting_on
                except BaseException as exc:
                    throw = exc
        finally:
            self.pending = False
