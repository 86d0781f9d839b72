"""`watch()` (gateway/relay/watch.py) and `CancelOnStop` (gateway/relay/json.py) alone: small
async generators of delta batches stand in for the model, events for Stop, no servers.

The loop's clock is simulated (looptime): a quiet interval passes the moment nothing else is
ready, so a ping comes exactly `ping_interval` after the last event however busy the machine
is, and the tests assert on the sequence of what was yielded, not on how long it took.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest

from core.flags import Flag
from gateway.relay.json import CancelOnStop
from gateway.relay.watch import Signal, watch
from tests.support.garbage import cyclic_garbage, of_types

pytestmark = pytest.mark.looptime

IDLE, PING, STOPPED = Signal.IDLE, Signal.PING, Signal.STOPPED
PING_INTERVAL = 0.05
TIMEOUT = 0.12  # the model's own, in "time out"


def d(n: int) -> dict[str, Any]:
    return {"content": f"piece {n}"}


class Model:
    """A model's stream of delta batches, paced by the test: each `await` in `script` is a
    moment the model is silent. Notes whether the stream was closed and how many batches it
    handed out."""

    def __init__(self) -> None:
        self.closed = False
        self.produced = 0
        self.resume = asyncio.Event()

    async def batches(self, *script: list[dict[str, Any]] | str) -> AsyncIterator[list[Any]]:
        """Yield each batch in `script`; "wait" waits for `resume`, "hang" never returns,
        "fail" raises, "time out" waits longer than a timeout of its own allows."""
        try:
            for step in script:
                if step == "wait":
                    await self.resume.wait()
                    self.resume.clear()
                elif step == "hang":
                    await asyncio.Event().wait()
                elif step == "fail":
                    raise RuntimeError("the model server broke")
                elif step == "time out":
                    async with asyncio.timeout(TIMEOUT):
                        await asyncio.Event().wait()
                else:
                    self.produced += 1
                    yield step  # type: ignore[misc]
        finally:
            self.closed = True


async def test_the_fast_path_yields_every_delta_and_idle_after_each_batch() -> None:
    model = Model()
    seen: list[Any] = []
    async for item in watch(
        model.batches([d(0), d(1)], "wait", [d(2)], [d(3)]), ping_interval=None, stop=None
    ):
        seen.append(item)
        if seen == [d(0), d(1), IDLE]:
            model.resume.set()  # the model speaks again once the client was told it is idle
    assert seen == [d(0), d(1), IDLE, d(2), IDLE, d(3), IDLE]
    assert model.closed


async def test_it_yields_every_delta_in_order_and_idle_only_when_nothing_more_is_ready() -> None:
    model = Model()
    seen: list[Any] = []
    async for item in watch(
        model.batches([d(0), d(1)], "wait", [d(2)], [d(3)], [d(4)]),
        ping_interval=None,
        stop=Flag(),
    ):
        seen.append(item)
        if seen[-2:] == [d(1), IDLE]:
            model.resume.set()
    # Batches that are ready together go out with no IDLE between them.
    assert seen == [d(0), d(1), IDLE, d(2), d(3), d(4)]
    assert model.closed


async def test_a_ping_after_each_quiet_interval() -> None:
    loop = asyncio.get_running_loop()
    model = Model()
    seen: list[Any] = []
    pinged_at: list[float] = []
    started = loop.time()
    async for item in watch(
        model.batches([d(0)], "wait", [d(1)]), ping_interval=PING_INTERVAL, stop=None
    ):
        seen.append(item)
        if item is PING:
            pinged_at.append(loop.time() - started)
            # The model is read in this task: the pings need no task either.
            assert asyncio.all_tasks() == {asyncio.current_task()}
            if len(pinged_at) == 2:
                model.resume.set()
    assert seen == [d(0), IDLE, PING, PING, d(1)]
    # On the loop's clock: one interval after the last delta, then one after the last ping.
    assert pinged_at == pytest.approx([PING_INTERVAL, 2 * PING_INTERVAL])


async def test_no_ping_while_deltas_flow_faster_than_the_interval() -> None:
    async def flowing() -> AsyncIterator[list[dict[str, Any]]]:
        for n in range(20):  # 20 times 0.03 s: a stream many intervals long, never quiet for one
            yield [d(n)]
            await asyncio.sleep(PING_INTERVAL * 0.6)

    seen = [item async for item in watch(flowing(), ping_interval=PING_INTERVAL, stop=None)]
    assert [item for item in seen if isinstance(item, dict)] == [d(n) for n in range(20)]
    assert PING not in seen


async def test_a_ping_once_the_flow_goes_quiet() -> None:
    model = Model()
    seen: list[Any] = []
    flow = [[d(n)] for n in range(5)]
    async for item in watch(
        model.batches(*flow, "wait", [d(5)]), ping_interval=PING_INTERVAL, stop=None
    ):
        seen.append(item)
        if item is PING:
            model.resume.set()
    deltas = [item for item in seen if isinstance(item, dict)]
    assert deltas == [d(n) for n in range(6)]
    assert seen.count(PING) == 1
    assert seen.index(d(4)) < seen.index(PING) < seen.index(d(5))


async def test_stopped_the_moment_stop_is_set_while_the_model_is_silent() -> None:
    loop = asyncio.get_running_loop()
    model = Model()
    stop = Flag()
    seen: list[Any] = []
    pressed_at = stopped_at = None
    async for item in watch(model.batches([d(0)], "hang"), ping_interval=10.0, stop=stop):
        seen.append(item)
        if seen == [d(0), IDLE]:
            pressed_at = loop.time() + 1.0
            loop.call_at(pressed_at, stop.set)  # pressed while the model says nothing
        if item is STOPPED:
            stopped_at = loop.time()
    # STOPPED ends the stream: the loop above ended without the model ever speaking again.
    assert seen == [d(0), IDLE, STOPPED]
    # On the loop's clock, STOPPED came when Stop was pressed: it waited for nothing.
    assert stopped_at == pytest.approx(pressed_at)
    assert model.closed  # the silent read was cancelled, and the model's stream closed


async def test_nothing_after_stopped_even_when_deltas_are_ready() -> None:
    model = Model()
    stop = Flag()
    seen: list[Any] = []
    async for item in watch(
        model.batches([d(0)], [d(1)], [d(2)], "hang"), ping_interval=None, stop=stop
    ):
        seen.append(item)
        if item == d(0):
            stop.set()  # d(1) and d(2) are ready
    assert seen == [d(0), STOPPED]
    assert model.produced == 1  # nothing was read ahead of the client


async def test_a_stop_set_before_the_first_delta_yields_only_stopped() -> None:
    model = Model()
    stop = Flag()
    stop.set()
    seen = [item async for item in watch(model.batches([d(0)]), ping_interval=None, stop=stop)]
    assert seen == [STOPPED]


@pytest.mark.parametrize("with_stop", [False, True], ids=["fast-path", "queue"])
async def test_the_models_error_reaches_the_consumer_after_the_deltas_before_it(
    with_stop: bool,
) -> None:
    model = Model()
    deltas: list[Any] = []
    with pytest.raises(RuntimeError, match="the model server broke"):
        async for item in watch(
            model.batches([d(0), d(1)], [d(2)], "fail"),
            ping_interval=None,
            stop=Flag() if with_stop else None,
        ):
            if isinstance(item, dict):
                deltas.append(item)
    assert deltas == [d(0), d(1), d(2)]
    assert model.closed


async def test_closing_early_cancels_the_silent_read_and_closes_the_models_stream() -> None:
    model = Model()
    watched = watch(model.batches([d(0)], "hang"), ping_interval=PING_INTERVAL, stop=None)
    assert await anext(watched) == d(0)
    assert await anext(watched) is IDLE
    await watched.aclose()
    assert model.closed
    assert asyncio.all_tasks() == {asyncio.current_task()}  # no reader left


async def test_closing_early_while_the_model_streams_leaves_it_free_to_close() -> None:
    model = Model()
    deltas = model.batches(*([d(n)] for n in range(1000)))
    watched = watch(deltas, ping_interval=PING_INTERVAL, stop=Flag())
    assert await anext(watched) == d(0)
    await watched.aclose()
    assert asyncio.all_tasks() == {asyncio.current_task()}
    # The reader is done with the model's stream: its owner can close it at once (the relay
    # does), which would raise if the stream were still being read.
    await deltas.aclose()  # type: ignore[attr-defined]
    assert model.closed
    assert model.produced < 1000


async def test_nothing_is_read_ahead_of_a_slow_consumer() -> None:
    model = Model()
    received = 0
    read_ahead: list[int] = []
    async for item in watch(
        model.batches(*([d(n)] for n in range(20))), ping_interval=None, stop=Flag()
    ):
        if isinstance(item, dict):
            received += 1
            read_ahead.append(model.produced - received)
            await asyncio.sleep(0.01)  # the client reads slower than the model writes
    assert received == 20
    assert max(read_ahead) == 0


async def test_the_client_leaving_while_the_model_is_silent_cancels_the_models_read() -> None:
    model = Model()
    seen: list[Any] = []

    async def client() -> None:
        async for item in watch(
            model.batches([d(0)], "hang"), ping_interval=PING_INTERVAL, stop=Flag()
        ):
            seen.append(item)

    task = asyncio.create_task(client())
    await asyncio.sleep(2.5 * PING_INTERVAL)  # two pings into the model's silence
    task.cancel()  # what the endpoint does when the client leaves
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [d(0), IDLE, PING, PING]
    assert model.closed


async def test_a_timeout_inside_the_models_stream_still_fires_through_the_pings() -> None:
    model = Model()
    seen: list[Any] = []
    with pytest.raises(TimeoutError):
        async for item in watch(
            model.batches([d(0)], "time out"), ping_interval=PING_INTERVAL, stop=Flag()
        ):
            seen.append(item)
    # The model's timer cancelled the task; the model's read saw it where it waited.
    assert seen == [d(0), IDLE, PING, PING]
    assert model.closed


# CancelOnStop: a stop ends the block it guards, quietly; any other cancellation goes on.


async def until_idle() -> None:
    """Return once everything already scheduled has run: on the simulated clock, time moves
    only when the loop has nothing else to do, so this timer fires after every pending step."""
    await asyncio.sleep(1)


async def test_a_stop_ends_the_block_quietly_and_the_task_goes_on() -> None:
    stop = Flag()
    entered = asyncio.Event()
    after: list[str] = []

    async def guarded() -> bool:
        with CancelOnStop(stop) as stopping:
            entered.set()
            await asyncio.Event().wait()  # a model that never answers
        after.append("after the block")
        await asyncio.sleep(0)  # not cancelled any more
        after.append("still running")
        return stopping.stopped

    task = asyncio.create_task(guarded())
    await entered.wait()
    stop.set()
    assert await task is True
    assert after == ["after the block", "still running"]
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_block_that_ends_first_is_not_stopped_later() -> None:
    stop = Flag()
    left_the_block = asyncio.Event()
    released = asyncio.Event()

    async def guarded() -> bool:
        with CancelOnStop(stop) as stopping:
            await asyncio.sleep(0)
        left_the_block.set()
        await released.wait()  # outside the block: a stop now must not cancel this
        return stopping.stopped

    task = asyncio.create_task(guarded())
    await left_the_block.wait()
    stop.set()
    await until_idle()  # whatever the stop would set off has happened
    released.set()
    assert await task is False


async def test_a_stop_cancels_only_the_task_that_entered_the_block() -> None:
    stop = Flag()
    entered = asyncio.Event()
    bystander_done = asyncio.Event()

    async def guarded() -> bool:
        with CancelOnStop(stop) as stopping:
            entered.set()
            await asyncio.Event().wait()
        return stopping.stopped

    async def bystander() -> None:
        await stop.wait()  # the task that sees the stop is not the one cancelled
        await until_idle()
        bystander_done.set()

    guarded_task = asyncio.create_task(guarded())
    bystander_task = asyncio.create_task(bystander())
    await entered.wait()
    stop.set()
    assert await guarded_task is True
    await bystander_task
    assert bystander_done.is_set()


@pytest.mark.parametrize("then_stop", [False, True], ids=["alone", "stop-right-after"])
async def test_a_cancellation_from_outside_the_block_propagates(then_stop: bool) -> None:
    stop = Flag()
    entered = asyncio.Event()
    stopping = CancelOnStop(stop)

    async def guarded() -> None:
        with stopping:
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(guarded())
    await entered.wait()
    task.cancel()
    if then_stop:
        stop.set()  # too late: the task resumes with the outside cancellation first
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not stopping.stopped


async def test_a_cancellation_from_outside_still_propagates_when_a_stop_comes_with_it() -> None:
    stop = Flag()
    entered = asyncio.Event()
    stopping = CancelOnStop(stop)

    async def guarded() -> None:
        with stopping:
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(guarded())
    await entered.wait()
    # The client leaves in the same moment as someone presses Stop: both cancels are on their
    # way before the task resumes, the stop's first.
    stop.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stopping.stopped  # the stop did cancel it first; the client's cancel still went on


async def test_without_a_stop_event_the_block_is_plain() -> None:
    with CancelOnStop(None) as stopping:
        await asyncio.sleep(0.01)
    assert stopping.stopped is False
    assert asyncio.all_tasks() == {asyncio.current_task()}


# Reference cycles: what a stream or a request leaves behind is freed when it ends, not by the
# garbage collector (tests/support/garbage.py).


async def test_a_watched_stream_with_pings_leaves_no_reference_cycle() -> None:
    model = Model()
    with cyclic_garbage() as left:
        seen = []
        async for item in watch(
            model.batches([d(0)], "wait", [d(1)]), ping_interval=PING_INTERVAL, stop=Flag()
        ):
            seen.append(item)
            if item is PING:
                model.resume.set()
        assert seen == [d(0), IDLE, PING, d(1)]

    assert of_types(left, asyncio.Future, asyncio.TimerHandle, types.FunctionType) == []


async def test_a_guarded_block_leaves_no_reference_cycle_with_its_task() -> None:
    async def guarded() -> bool:
        with CancelOnStop(Flag()) as stopping:
            await asyncio.sleep(0)
        return stopping.stopped

    with cyclic_garbage() as left:
        assert await asyncio.create_task(guarded()) is False

    assert of_types(left, CancelOnStop, asyncio.Task, types.FunctionType) == []
