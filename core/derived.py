"""What the hot path derives from an object it already holds — a key's budgets, its rate
limits — computed once per object instead of once per request.

Per object, not per equal object: Django models compare equal by primary key, but a key read
again after a change (the lookup cache drops its entries on every change, `core.lookups`) is a
new object, and what is derived from it is derived again. Each entry holds its object, so an
id is never reused while its entry stands; the table is cleared when it grows past its bound
(cached objects are replaced at least every minute, so old entries are garbage).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

Source = TypeVar("Source")
Derived = TypeVar("Derived")


class PerObject(Generic[Source, Derived]):
    """`derived(obj)`: `derive(obj)`, computed the first time it is asked for that object."""

    __slots__ = ("_bound", "_derive", "_entries")

    def __init__(self, derive: Callable[[Source], Derived], bound: int = 1024) -> None:
        self._derive = derive
        self._entries: dict[int, tuple[Source, Derived]] = {}
        self._bound = bound

    def __call__(self, source: Source) -> Derived:
        entry = self._entries.get(id(source))
        if entry is not None and entry[0] is source:
            return entry[1]
        value = self._derive(source)
        if len(self._entries) >= self._bound:
            self._entries.clear()
        self._entries[id(source)] = (source, value)
        return value
