"""`core.loops.PerLoop`: one instance per event loop, the same one every time it is asked."""

from __future__ import annotations

import asyncio

from core.loops import PerLoop


def test_each_loop_gets_its_own_instance_and_the_same_one_each_time() -> None:
    registry = PerLoop(object)

    async def twice() -> tuple[object, object]:
        return registry(), registry()

    first_loop = asyncio.run(twice())
    second_loop = asyncio.run(twice())

    assert first_loop[0] is first_loop[1]
    assert second_loop[0] is second_loop[1]
    assert first_loop[0] is not second_loop[0]


def test_set_and_pop_replace_and_forget_the_running_loop_s_instance() -> None:
    registry = PerLoop(object)
    mine = object()

    async def scenario() -> None:
        made = registry()
        registry.set(mine)
        assert registry() is mine
        assert registry.pop() is mine
        assert registry() is not made and registry() is not mine
        assert registry.current() is registry()

    asyncio.run(scenario())


def test_instances_lists_every_live_loop_s_instance() -> None:
    registry = PerLoop(list)

    async def make() -> None:
        registry().append("here")
        assert registry.instances() == [["here"]]

    asyncio.run(make())
