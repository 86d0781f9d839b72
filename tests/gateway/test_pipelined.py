"""The pipelined Redis connection (`gateway/pipelined.py`) and the registry writes on it, on the
real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import redis
from django.conf import settings

from gateway.live import live_generations
from gateway.pipelined import PipelinedConnection


def key(name: str) -> str:
    return f"{settings.REDIS_PREFIX}:pipelined-test:{name}"


async def test_it_answers_commands_in_order_through_their_callbacks() -> None:
    connection = PipelinedConnection(settings.REDIS_URL)
    replies: list[Any] = []
    connection.send(b"SET", key("a"), b"1", b"EX", 60)
    connection.send(b"INCR", key("a"), on_reply=replies.append)
    connection.send(b"HGET", key("a"), b"field", on_reply=replies.append)  # wrong type
    connection.send(b"GET", key("a"), on_reply=replies.append)
    await connection.barrier()
    assert replies[0] == 2 and replies[2] == b"2"
    assert isinstance(replies[1], Exception) and "WRONGTYPE" in str(replies[1])
    connection.close()


async def test_it_reconnects_when_redis_drops_it_and_tells_who_waited() -> None:
    connection = PipelinedConnection(settings.REDIS_URL)
    ids: list[Any] = []
    connection.send(b"CLIENT", b"ID", on_reply=ids.append)
    await connection.barrier()
    lost: list[Any] = []
    connection.send(b"BLPOP", key("never"), 5, on_reply=lost.append)
    connection.write_now()
    await asyncio.sleep(0.05)
    redis.Redis.from_url(settings.REDIS_URL).client_kill_filter(_id=ids[0])
    await asyncio.sleep(0.05)
    assert len(lost) == 1 and isinstance(lost[0], ConnectionError)

    replies: list[Any] = []
    connection.send(b"SET", key("b"), b"after", b"EX", 60)
    connection.send(b"GET", key("b"), on_reply=replies.append)
    await connection.barrier()
    assert replies == [b"after"]
    connection.close()


async def test_a_stop_finds_a_generation_as_soon_as_register_returns() -> None:
    # What Stop relies on: register does not wait for Redis's answer, yet a stop sent on
    # another connection right after register returned (as another worker's, after the client
    # saw the headers) finds the entry — only for the generation's own organization.
    live = live_generations()
    await live.start()
    for n in range(100):
        run_id = f"chatcmpl-pipelined-stop-{n}"
        flag = await live.register(run_id, 7)
        assert await live.stop(run_id, 8) is False
        assert await live.stop(run_id, 7) is True
        await asyncio.wait_for(flag.wait(), 1)
        await live.unregister(run_id)


async def test_an_unregistered_generation_is_gone_for_everyone_once_unregister_returns() -> None:
    live = live_generations()
    await live.start()
    other = redis.Redis.from_url(settings.REDIS_URL)
    for n in range(200):
        run_id = f"chatcmpl-pipelined-gone-{n}"
        await live.register(run_id, 7)
        await live.unregister(run_id)
        assert other.get(f"{settings.REDIS_PREFIX}:live:{run_id}") is None
    other.close()
    assert await live.stop("chatcmpl-pipelined-gone-0", 7) is False
