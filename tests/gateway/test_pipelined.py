"""The pipelined Redis connection (`core/backplane/pipelined.py`) and the stop requests answered
on it (`gateway/coordination/stop.py`), on the real Redis (and on the memory backplane where one
process is enough)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from django.conf import settings

from core.backplane import backplane
from core.backplane.pipelined import PipelinedConnection
from core.backplane.redis import broadcast_prefix
from gateway.coordination.stop import STOP_CHANNEL, live_generations
from tests.support.waiting import wait_until_async


def key(name: str) -> str:
    return f"{settings.REDIS_PREFIX}:pipelined-test:{name}"


@pytest.mark.redis
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


@pytest.mark.redis
async def test_it_reconnects_when_redis_drops_it_and_tells_who_waited() -> None:
    connection = PipelinedConnection(settings.REDIS_URL)
    ids: list[Any] = []
    connection.send(b"CLIENT", b"ID", on_reply=ids.append)
    await connection.barrier()
    lost: list[Any] = []
    connection.send(b"BLPOP", key("never"), 5, on_reply=lost.append)
    connection.write_now()
    admin = redis.Redis.from_url(settings.REDIS_URL)
    await wait_until_async(
        lambda: any(
            int(client["id"]) == ids[0] and client["cmd"] == "blpop"
            for client in admin.client_list()
        ),
        message="the BLPOP did not reach Redis",
    )
    admin.client_kill_filter(_id=ids[0])
    await wait_until_async(lambda: lost, message="the waiting command was not told")
    admin.close()
    assert len(lost) == 1 and isinstance(lost[0], ConnectionError)

    replies: list[Any] = []
    connection.send(b"SET", key("b"), b"after", b"EX", 60)
    connection.send(b"GET", key("b"), on_reply=replies.append)
    await connection.barrier()
    assert replies == [b"after"]
    connection.close()


async def test_a_stop_is_decided_by_the_generations_organization() -> None:
    live = live_generations()
    try:
        flag = await live.register("chatcmpl-pipelined-stop", 7)
        assert await live.stop("chatcmpl-pipelined-stop", 8) is False  # asks the other workers
        assert not flag.is_set()
        assert await live.stop("chatcmpl-pipelined-stop", 7) is True
        assert flag.is_set()
        assert await live.stop("chatcmpl-pipelined-stop", 7) is False  # stopped once
    finally:
        await backplane().close()


async def test_a_generation_that_ended_cannot_be_stopped() -> None:
    live = live_generations()
    try:
        flag = await live.register("chatcmpl-pipelined-gone", 7)
        live.unregister("chatcmpl-pipelined-gone")
        assert await live.stop("chatcmpl-pipelined-gone", 7) is False
        assert not flag.is_set()
    finally:
        await backplane().close()


@pytest.mark.redis
async def test_every_listening_worker_answers_a_stop_request() -> None:
    # What a stop through another worker waits on: one answer per listener, on its reply list.
    live = live_generations()
    other = redis.Redis.from_url(settings.REDIS_URL)
    try:
        await live.start()
        await live.register("chatcmpl-pipelined-remote", 7)
        answers = key("answers")
        heard = other.publish(
            broadcast_prefix(settings.REDIS_PREFIX) + STOP_CHANNEL,
            f"chatcmpl-pipelined-remote 7 {answers}",
        )
        assert heard >= 1
        replies = []
        for _ in range(heard):  # every worker of this suite answers; only ours with a yes
            reply = await asyncio.to_thread(other.blpop, [answers], 2)  # the loop must answer
            assert reply is not None
            replies.append(reply[1])
        assert replies.count(b"1") == 1
    finally:
        other.close()
        await backplane().close()
