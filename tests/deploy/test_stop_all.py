"""`LiveGenerations.stop_all`: what a worker's shutdown does once the grace is over."""

from __future__ import annotations

from core.backplane.memory import MemoryBackplane
from gateway.coordination.shutdown import WORKER_SHUTDOWN
from gateway.coordination.stop import LiveGenerations


async def test_it_stops_every_generation_of_the_worker_saying_why() -> None:
    live = LiveGenerations(MemoryBackplane())
    first = await live.register("chatcmpl-first", 1)
    second = await live.register("chatcmpl-second", 2)  # any organization's

    assert live.stop_all(WORKER_SHUTDOWN) == 2

    assert first.is_set() and first.reason == WORKER_SHUTDOWN
    assert second.is_set() and second.reason == WORKER_SHUTDOWN
    # Forgotten as a stop forgets them: a Stop for one now answers 404.
    assert await live.stop("chatcmpl-first", 1) is False


async def test_a_generation_that_starts_after_it_is_stopped_at_once() -> None:
    live = LiveGenerations(MemoryBackplane())
    live.stop_all(WORKER_SHUTDOWN)

    late = await live.register("chatcmpl-late", 1)

    assert late.is_set() and late.reason == WORKER_SHUTDOWN
    assert live.stop_all(WORKER_SHUTDOWN) == 0  # it was never kept


async def test_a_stop_someone_presses_gives_no_reason() -> None:
    live = LiveGenerations(MemoryBackplane())
    flag = await live.register("chatcmpl-pressed", 1)

    assert await live.stop("chatcmpl-pressed", 1) is True

    assert flag.is_set() and flag.reason == ""
