"""The load client's HTTP/1.1: a keep-alive connection, a response read as it arrives (chunked
transfer encoding decoded, the body split into SSE events, each token event timestamped), and
the request it sends, made once as bytes."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlsplit

CONNECT_ATTEMPTS = 5
# A token event is one carrying the mock's content (`"content":"tok0"`, `"content":" tok1"`, …).
TOKEN_MARKERS = (b'"content":"tok', b'"content":" tok')


class ProtocolError(Exception):
    pass


HEAD, CHUNK_SIZE, CHUNK_DATA, CHUNK_CRLF, TRAILER, BODY, DONE = range(7)


@dataclass
class Response:
    """One response being read: its timings, and the SSE events in its body."""

    sent_at: float
    status: int = 0
    headers_at: float | None = None
    first_body_at: float | None = None
    done_at: float | None = None
    token_times: list[float] = field(default_factory=list)
    events: int = 0
    saw_done: bool = False
    body_bytes: int = 0
    _state: int = HEAD
    _buf: bytearray = field(default_factory=bytearray)
    _remaining: int = 0
    _chunked: bool = False
    _pending: bytes = b""

    def feed(self, data: bytes, now: float) -> bool:
        """Consume bytes; True once the response is complete."""
        buf = self._buf
        buf += data
        while True:
            state = self._state
            if state == HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return False
                self._head(bytes(buf[:end]), now)
                del buf[: end + 4]
            elif state == CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    return False
                size = int(bytes(buf[:end]).split(b";")[0], 16)
                del buf[: end + 2]
                if size:
                    self._remaining, self._state = size, CHUNK_DATA
                else:
                    self._state = TRAILER
            elif state in (CHUNK_DATA, BODY):
                if not buf:
                    if state == BODY and self._remaining == 0:
                        return self._finish(now)
                    return False
                take = min(self._remaining, len(buf))
                self._body(bytes(buf[:take]), now)
                del buf[:take]
                self._remaining -= take
                if self._remaining == 0:
                    if state == BODY:
                        return self._finish(now)
                    self._state = CHUNK_CRLF
            elif state == CHUNK_CRLF:
                if len(buf) < 2:
                    return False
                del buf[:2]
                self._state = CHUNK_SIZE
            elif state == TRAILER:
                end = buf.find(b"\r\n")
                if end < 0:
                    return False
                line = bytes(buf[:end])
                del buf[: end + 2]
                if not line:
                    return self._finish(now)
            else:
                return True

    def _head(self, head: bytes, now: float) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ProtocolError(f"bad status line {lines[0][:80]!r}")
        self.status = int(parts[1])
        self.headers_at = now
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value.lower():
                self._chunked = True
            elif name == b"content-length":
                length = int(value.strip())
        if self._chunked:
            self._state = CHUNK_SIZE
        elif length is not None:
            self._remaining, self._state = length, BODY
        else:
            raise ProtocolError("a response without length or chunked encoding")

    def _body(self, data: bytes, now: float) -> None:
        if self.first_body_at is None:
            self.first_body_at = now
        self.body_bytes += len(data)
        pending = self._pending + data
        start = 0
        while True:
            end = pending.find(b"\n\n", start)
            if end < 0:
                break
            event = pending[start:end]
            start = end + 2
            self.events += 1
            if any(marker in event for marker in TOKEN_MARKERS):
                self.token_times.append(now)
            elif event == b"data: [DONE]":
                self.saw_done = True
        self._pending = pending[start:]

    def _finish(self, now: float) -> bool:
        self.done_at = now
        self._state = DONE
        return True


class Connection(asyncio.Protocol):
    """One keep-alive client connection; `request` sends a request and reads its response."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: Response | None = None
        self.waiter: asyncio.Future[Response] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream's protocol is given a stream transport (typed as the base class).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        response, waiter = self.response, self.waiter
        if response is None or waiter is None or waiter.done():
            return
        try:
            complete = response.feed(data, now)
        except Exception as exc:  # a protocol error ends this connection
            waiter.set_exception(exc)
            self.close()
            return
        if complete:
            self.response = None
            waiter.set_result(response)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc!r}"))

    async def request(self, raw: bytes) -> Response:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.response = Response(sent_at=time.perf_counter())
        self.waiter = loop.create_future()
        self.transport.write(raw)
        return await self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass
class Endpoint:
    """Where the load goes, and the request it sends, as raw bytes."""

    host: str
    port: int
    raw_request: bytes


def build_endpoint(url: str, body: bytes, headers: list[str]) -> Endpoint:
    """The request to send, as bytes: a POST of `body` to `url`, with `headers` ("Name: value")
    beside the content type and length."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    if host not in ("127.0.0.1", "localhost"):
        raise SystemExit("the benchmark only sends traffic to 127.0.0.1")
    head = [
        f"POST {parts.path or '/'} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *headers,
    ]
    return Endpoint(host, port, ("\r\n".join(head) + "\r\n\r\n").encode() + body)


async def connect(endpoint: Endpoint) -> Connection:
    loop = asyncio.get_running_loop()
    error: Exception | None = None
    for attempt in range(CONNECT_ATTEMPTS):
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(Connection, endpoint.host, endpoint.port), 10
            )
            return protocol
        except (OSError, TimeoutError) as exc:
            error = exc
            await asyncio.sleep(0.05 * (attempt + 1))
    raise ConnectionError(f"could not connect: {error!r}")
