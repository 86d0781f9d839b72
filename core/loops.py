"""One instance per event loop: the registry behind `run_writer()`, `live_generations()`, ….

An asyncio object (a queue, a task, a connection) belongs to the loop that made it. A server
process runs one loop, but the test suite runs many in one process (each async test gets its
own), so every process-wide service is kept per loop, made on first use. The loops are held
weakly: a loop that is gone takes its instances with it.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """`registry()` returns the running loop's instance, made by `factory()` the first time."""

    __slots__ = ("_factory", "_instances", "_last_instance", "_last_loop")

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._instances: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )
        # The last loop asked for and its instance: a server has one loop, and the hot path
        # asks several registries a request (a weak dictionary's lookup costs ten times more).
        self._last_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._last_instance: T | None = None

    def __call__(self) -> T:
        loop = asyncio.get_running_loop()
        last = self._last_loop
        if last is not None and last() is loop:
            instance = self._last_instance
            assert instance is not None
            return instance
        instance = self._instances.get(loop)
        if instance is None:
            instance = self._instances[loop] = self._factory()
        self._last_loop, self._last_instance = weakref.ref(loop), instance
        return instance

    def current(self) -> T | None:
        """The running loop's instance if it was made, without making one."""
        return self._instances.get(asyncio.get_running_loop())

    def set(self, instance: T) -> None:
        """Make `instance` the running loop's (a test's own configuration, say)."""
        self._instances[asyncio.get_running_loop()] = instance
        self._forget_last()

    def pop(self) -> T | None:
        """Forget the running loop's instance (it is being closed); return it if there was one."""
        self._forget_last()
        return self._instances.pop(asyncio.get_running_loop(), None)

    def _forget_last(self) -> None:
        self._last_loop = self._last_instance = None

    def instances(self) -> list[T]:
        """Every live loop's instance (for status reports)."""
        return list(self._instances.values())
