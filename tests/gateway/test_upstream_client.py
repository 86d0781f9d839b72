"""The model servers' client (gateway/upstream/client.py and transport.py): the chat request it
builds, what reaches the model server on the wire, and what closing a reply does to its
connection. A raw asyncio server on loopback plays the model server, so the bytes it receives are
the bytes sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import httpx
import pytest

from gateway.errors import UpstreamUnavailable
from gateway.upstream.client import (
    ReplicaConfig,
    client_for,
    close_clients,
    completions_url,
    open_stream,
)
from tests.support.garbage import cyclic_garbage, of_types

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
DONE = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


@dataclass
class ModelServer:
    """What a loopback model server saw: each request's head, the peer it came from, and
    whether the client closed the connection while the reply was still being sent."""

    base_url: str = ""
    heads: list[bytes] = field(default_factory=list)
    peers: list[tuple[str, int]] = field(default_factory=list)
    closed_mid_reply: asyncio.Event = field(default_factory=asyncio.Event)


Reply = Callable[[asyncio.StreamWriter], Awaitable[None]]


async def whole_reply(writer: asyncio.StreamWriter) -> None:
    body = CHUNK + DONE
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


async def endless_reply(writer: asyncio.StreamWriter) -> None:
    """One chunk, then a chunk every 20 ms until the client goes away."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
    writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
    while True:
        writer.write(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
        await writer.drain()
        await asyncio.sleep(0.02)


@pytest.fixture
async def model_server() -> AsyncIterator[Callable[[Reply], Awaitable[ModelServer]]]:
    servers: list[asyncio.Server] = []

    async def serve(reply: Reply) -> ModelServer:
        seen = ModelServer()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    try:
                        head = await reader.readuntil(b"\r\n\r\n")
                    except asyncio.IncompleteReadError:
                        return  # closed between requests
                    seen.heads.append(head)
                    seen.peers.append(writer.get_extra_info("peername"))
                    length = next(
                        int(line.split(b":")[1])
                        for line in head.lower().split(b"\r\n")
                        if line.startswith(b"content-length:")
                    )
                    await reader.readexactly(length)
                    try:
                        await reply(writer)
                        await writer.drain()
                    except ConnectionError:
                        seen.closed_mid_reply.set()
                        return
            finally:
                writer.close()

        server = await asyncio.start_server(connection, "127.0.0.1", 0)
        servers.append(server)
        seen.base_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        return seen

    yield serve
    await close_clients()
    for server in servers:
        server.close()


def config(base_url: str, api_key: str = "sk-model-server") -> ReplicaConfig:
    return ReplicaConfig(
        base_url=base_url, name="test/0", api_key=api_key, connect_timeout=2, read_timeout=5
    )


async def test_the_chat_request_is_the_one_build_request_would_make() -> None:
    client = client_for(config("http://127.0.0.1:9/v1"))
    url = completions_url("http://127.0.0.1:9/v1")
    body = b'{"model":"m","messages":[]}'

    built = client.chat_request(url, body)
    expected = client.build_request(
        "POST",
        url,
        content=body,
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
    )

    assert (built.method, built.url, built.content) == (expected.method, expected.url, body)
    assert built.headers.multi_items() == expected.headers.multi_items()
    assert built.headers["authorization"] == "Bearer sk-model-server"
    assert built.extensions == expected.extensions
    await close_clients()


async def test_the_model_server_receives_the_headers_as_before(model_server) -> None:
    # The wire format httpx-aiohttp's transport produced: httpx's merged headers, lower-case,
    # in httpx's order (a model server's logs and proxies see the same request as before).
    server = await model_server(whole_reply)
    stream = await open_stream(config(server.base_url), b'{"model":"m"}')
    batches = [batch async for batch in stream.chunks()]
    await stream.aclose()

    assert [chunk for batch in batches for chunk in batch] == [
        {"choices": [{"index": 0, "delta": {"content": "hi"}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    [head] = server.heads
    request_line, *header_lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    assert request_line == "POST /v1/chat/completions HTTP/1.1"
    port = server.base_url.split(":")[2].split("/")[0]
    assert header_lines == [
        f"host: 127.0.0.1:{port}",
        "accept-encoding: gzip, deflate",
        "connection: keep-alive",
        f"user-agent: python-httpx/{httpx.__version__}",
        "authorization: Bearer sk-model-server",
        "content-type: application/json",
        "accept: text/event-stream",
        "content-length: 13",
    ]


async def test_a_reply_read_to_its_end_leaves_its_connection_for_the_next(model_server) -> None:
    server = await model_server(whole_reply)
    for _ in range(3):
        stream = await open_stream(config(server.base_url), b"{}")
        async for _ in stream.chunks():
            pass
        await stream.aclose()

    assert len(server.peers) == 3
    assert len(set(server.peers)) == 1  # one keep-alive connection
    assert not server.closed_mid_reply.is_set()


async def test_a_reply_closed_before_its_end_closes_its_connection(model_server) -> None:
    # How a stop reaches the model server: the connection it is still writing to goes away.
    replies = [endless_reply, whole_reply]

    async def endless_then_whole(writer: asyncio.StreamWriter) -> None:
        await replies.pop(0)(writer)

    server = await model_server(endless_then_whole)
    stream = await open_stream(config(server.base_url), b"{}")
    chunks = stream.chunks()
    first = await anext(chunks)
    assert first == [{"choices": [{"index": 0, "delta": {"content": "hi"}}]}]

    await chunks.aclose()
    await stream.aclose()

    await asyncio.wait_for(server.closed_mid_reply.wait(), timeout=5)
    # The next request gets a connection of its own, not the one closed mid-reply.
    stream = await open_stream(config(server.base_url), b"{}")
    async for _ in stream.chunks():
        pass
    await stream.aclose()
    assert len(server.peers) == 2
    assert server.peers[0] != server.peers[1]


async def test_a_model_server_nobody_listens_at_is_unavailable_by_its_name() -> None:
    closed_port = 9  # discard: nothing listens on loopback here
    with pytest.raises(UpstreamUnavailable) as failed:
        await open_stream(config(f"http://127.0.0.1:{closed_port}/v1"), b"{}")
    assert "test/0" in failed.value.message
    assert "127.0.0.1" not in failed.value.message
    await close_clients()


async def test_a_closed_reply_is_freed_at_once_not_by_the_garbage_collector(model_server) -> None:
    # httpx binds a response and the stream it reads to each other; left so, every reply (with
    # aiohttp's response, its headers and the request) waited for a collection to be freed.
    server = await model_server(whole_reply)
    with cyclic_garbage() as left:
        for _ in range(3):
            stream = await open_stream(config(server.base_url), b"{}")
            async for _ in stream.chunks():
                pass
            await stream.aclose()
        del stream

    assert of_types(left, httpx.Response, httpx.Request, aiohttp.ClientResponse) == []
