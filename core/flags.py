"""A flag set once, whose listeners are told the moment it is set (the Stop button's flag)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Flag:
    """Like `asyncio.Event` set once, but listened to by callbacks: no task waits on it.

    A generation's relay listens for Stop on every request and almost never hears it; a task
    waiting on an `asyncio.Event` for that cost a task and two loop passes a request.
    """

    __slots__ = ("_listeners", "_set", "reason")

    def __init__(self) -> None:
        self._set = False
        self._listeners: list[Callable[[], object]] = []
        # Why it was set, when not by a person pressing Stop (e.g. "worker_shutdown").
        self.reason = ""

    def is_set(self) -> bool:
        return self._set

    def set(self, reason: str = "") -> None:
        """Set the flag and call every listener, now, in the order they came."""
        if self._set:
            return
        self._set = True
        self.reason = reason
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener()

    async def wait(self) -> None:
        """Return once the flag is set (for code that has a task to spare)."""
        if self._set:
            return
        set_now: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not set_now.done():
                set_now.set_result(None)

        self.listen(wake)
        await set_now

    def listen(self, listener: Callable[[], object]) -> Callable[[], None]:
        """Call `listener` when the flag is set (now, if it is); return what stops listening."""
        if self._set:
            listener()
            return _nothing
        self._listeners.append(listener)

        def stop_listening() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return stop_listening


def _nothing() -> None:
    pass
