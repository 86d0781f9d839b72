"""The read timeout of a model server's stream (`UpstreamStream`, gateway/upstream/client.py):
the wait for the first byte after the headers, then the wait between chunks, each timed from
the model server's last byte and never while it keeps sending. A real aiohttp server on loopback
plays the model server, each scenario a script of sends and silences.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from gateway.errors import UpstreamTimeout
from gateway.upstream.client import ReplicaConfig, UpstreamStream, close_clients, open_stream

TIMEOUT = 0.4


def event(n: int) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"%d"}}]}\n\n' % n


Script = Callable[[web.StreamResponse], Awaitable[None]]


@pytest.fixture
async def model_server() -> AsyncIterator[Callable[[Script], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def serve(script: Script) -> str:
        async def chat(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await script(response)
            return response

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        # Its handlers still silent at the end are cancelled at once, not waited for.
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}/v1"

    yield serve
    await close_clients()
    for runner in runners:
        await runner.cleanup()


async def opened(base_url: str, read_timeout: float = TIMEOUT) -> UpstreamStream:
    config = ReplicaConfig(
        base_url=base_url, name="test", api_key="", connect_timeout=2, read_timeout=read_timeout
    )
    return await open_stream(config, b"{}")


async def test_a_model_server_silent_after_its_headers_times_out_near_the_timeout(
    model_server,
) -> None:
    async def silent(response: web.StreamResponse) -> None:
        await asyncio.sleep(30)

    base_url = await model_server(silent)
    started = time.monotonic()  # before the headers arrive, where the wait starts
    stream = await opened(base_url)
    with pytest.raises(UpstreamTimeout, match="stopped sending"):
        async for _ in stream.chunks():
            pass
    waited = time.monotonic() - started
    # Not before the timeout, and not much after it (a busy machine adds its delays).
    assert TIMEOUT <= waited < TIMEOUT + 1.0
    await stream.aclose()


async def test_the_wait_between_chunks_is_timed_from_the_last_byte(model_server) -> None:
    async def one_then_silence(response: web.StreamResponse) -> None:
        await response.write(event(0))
        await asyncio.sleep(30)

    # A long first-byte wait, then a short one between chunks, as relay_chunks sets it.
    stream = await opened(await model_server(one_then_silence), read_timeout=30)
    batches = stream.chunks()
    first = await anext(batches)
    assert first[0]["choices"][0]["delta"] == {"content": "0"}
    started = time.monotonic()
    stream.wait_between_chunks(TIMEOUT)
    with pytest.raises(UpstreamTimeout, match="between chunks"):
        await anext(batches)
    waited = time.monotonic() - started
    assert TIMEOUT <= waited < TIMEOUT + 1.0
    await stream.aclose()


async def test_a_model_server_that_keeps_sending_is_never_timed_out(model_server) -> None:
    async def steady(response: web.StreamResponse) -> None:
        for n in range(12):  # 12 x 0.1 s: three times the timeout in all
            await response.write(event(n))
            await asyncio.sleep(TIMEOUT / 4)
        await response.write(b"data: [DONE]\n\n")

    stream = await opened(await model_server(steady))
    got = [chunk async for batch in stream.chunks() for chunk in batch]
    assert [c["choices"][0]["delta"]["content"] for c in got] == [str(n) for n in range(12)]
    await stream.aclose()
