"""Wait for what a test can observe — a row, a status, an event — instead of sleeping.

The deadlines here only turn a test that would hang into one that fails; they are not claims
about how fast anything is (timings belong in bench/)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str | Callable[[], object] = "the condition did not hold",
) -> T:
    """Poll `condition` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{message() if callable(message) else message} in {timeout}s")
        time.sleep(interval)


async def wait_until_async(
    condition: Callable[[], T],
    *,
    within: float = 10.0,
    interval: float = 0.01,
    message: str | Callable[[], object] = "the condition did not hold",
) -> T:
    """`wait_until` inside an event loop: the loop goes on running while it waits."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{message() if callable(message) else message} in {within}s")
        await asyncio.sleep(interval)
