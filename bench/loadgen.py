"""A lean asyncio HTTP/1.1 load client for what wrk cannot measure: gaps between streamed chunks
and per-request latency at one connection.

Raw asyncio protocols on uvloop (no client library in the way): each connection keeps alive,
decodes chunked transfer encoding, splits the body into SSE events and timestamps every event
as its bytes arrive. A token event is one carrying the mock's content (`"content":"tok0"`,
`"content":" tok1"`, …), so gaps are measured between tokens only: a gateway's own extra
events (a role chunk of its own, a separate finish chunk) don't count as gaps, they show in the
tail instead.

    loadgen.py slow    --url URL --body-file F [--auth KEY] --connections 1000 --ramp 3
                       --tokens 260 --duration 13
    loadgen.py latency --url URL --body-file F [--auth KEY] --duration 10

Prints one JSON object on stdout. Every loop is bounded by count and by time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# A stream stalls when the next token takes longer than this (20 drip intervals of 50 ms).
STALL_GAP_S = 1.0
CONNECT_ATTEMPTS = 5
TOKEN_MARKERS = (b'"content":"tok', b'"content":" tok')


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of values; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary_ms(values_s: list[float]) -> dict[str, float | None]:
    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 3)

    return {
        "n": len(values_s),
        "p50_ms": ms(percentile(values_s, 50)),
        "p90_ms": ms(percentile(values_s, 90)),
        "p99_ms": ms(percentile(values_s, 99)),
        "p999_ms": ms(percentile(values_s, 99.9)),
        "max_ms": ms(max(values_s) if values_s else None),
    }


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
        self.transport = transport  # type: ignore[assignment]

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
class Target:
    host: str
    port: int
    raw_request: bytes


def build_target(url: str, body: bytes, auth: str) -> Target:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    if host not in ("127.0.0.1", "localhost"):
        raise SystemExit("the benchmark only sends traffic to 127.0.0.1")
    head = [
        f"POST {parts.path or '/'} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    if auth:
        head.append(f"Authorization: Bearer {auth}")
    return Target(host, port, ("\r\n".join(head) + "\r\n\r\n").encode() + body)


async def connect(target: Target) -> Connection:
    loop = asyncio.get_running_loop()
    error: Exception | None = None
    for attempt in range(CONNECT_ATTEMPTS):
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(Connection, target.host, target.port), 10
            )
            return protocol
        except (OSError, TimeoutError) as exc:
            error = exc
            await asyncio.sleep(0.05 * (attempt + 1))
    raise ConnectionError(f"could not connect: {error!r}")


class SlowStream(asyncio.Protocol):
    """One connection carrying one long SSE stream, timed as cheaply as possible.

    With 1,000 streams at 20 tokens/s each, this client shares its core with the mock model
    server, so it does the least per packet: count token markers in the new bytes (plus a
    short tail of the previous ones, for a marker split across packets) and note the time.
    """

    TAIL = 32

    def __init__(self, gaps: list[float]) -> None:
        self.gaps = gaps
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sent_at = 0.0
        self.status = 0
        self.head = b""
        self.tail = b""
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.tokens = 0
        self.max_gap = 0.0
        self.saw_done = False
        self.finished_at: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.status:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.status = int(self.head.split(b" ", 2)[1])
            data = self.head[end + 4 :]
            self.head = b""
            if self.status != 200:
                self._finish(now)
                return
        seen = self.tail + data
        tokens = sum(seen.count(m) for m in TOKEN_MARKERS) - sum(
            self.tail.count(m) for m in TOKEN_MARKERS
        )
        if tokens:
            if self.last_token_at is None:
                self.first_token_at = now
            else:
                gap = now - self.last_token_at
                self.gaps.append(gap)
                self.max_gap = max(self.max_gap, gap)
            self.gaps.extend([0.0] * (tokens - 1))  # tokens that came in one packet
            self.last_token_at = now
            self.tokens += tokens
        if b"[DONE]" in seen:
            self.saw_done = True
        self.tail = seen[-self.TAIL :]
        if seen.endswith(b"\r\n0\r\n\r\n") or seen == b"0\r\n\r\n":
            self._finish(now)

    def _finish(self, now: float) -> None:
        self.finished_at = now
        if not self.done.done():
            self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc!r}"))


async def slow_streams(args: argparse.Namespace, target: Target) -> dict:
    """Open `connections` long streams over `ramp` seconds, one per connection, and time every
    token of every stream; they overlap fully once the ramp is over."""
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    hard_deadline = started + args.ramp + args.duration + args.drain_timeout
    gaps: list[float] = []
    ttft: list[float] = []
    streams: list[SlowStream] = []
    errors: dict[str, int] = {}

    async def one(index: int) -> None:
        await asyncio.sleep(index * args.ramp / args.connections)
        stream = SlowStream(gaps)
        streams.append(stream)
        for attempt in range(CONNECT_ATTEMPTS):
            try:
                await asyncio.wait_for(
                    loop.create_connection(lambda: stream, target.host, target.port), 10
                )
                break
            except (OSError, TimeoutError) as exc:
                if attempt == CONNECT_ATTEMPTS - 1:
                    name = type(exc).__name__
                    errors[name] = errors.get(name, 0) + 1
                    stream.done.cancel()
                    return
                await asyncio.sleep(0.05 * (attempt + 1))
        assert stream.transport is not None
        stream.sent_at = time.perf_counter()
        stream.transport.write(target.raw_request)
        try:
            await asyncio.wait_for(stream.done, hard_deadline - time.perf_counter())
        except TimeoutError:
            pass
        except Exception as exc:
            name = type(exc).__name__
            errors[name] = errors.get(name, 0) + 1

    tasks = [loop.create_task(one(i)) for i in range(args.connections)]
    _, pending = await asyncio.wait(tasks, timeout=hard_deadline - time.perf_counter() + 2)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=5)
    counts = {"completed": 0, "failed": 0, "stalled": 0, "unfinished": 0}
    tails: list[float] = []
    for stream in streams:
        if stream.transport is not None:
            stream.transport.close()
        if stream.first_token_at is not None:
            ttft.append(stream.first_token_at - stream.sent_at)
        if stream.finished_at is None:
            counts["unfinished"] += 1
        elif stream.status != 200 or not stream.saw_done or stream.tokens != args.tokens:
            counts["failed"] += 1
            key = f"status {stream.status}, {stream.tokens} tokens"
            errors[key] = errors.get(key, 0) + 1
        elif stream.max_gap > STALL_GAP_S:
            counts["stalled"] += 1
        else:
            counts["completed"] += 1
        if stream.finished_at is not None and stream.last_token_at is not None:
            tails.append(stream.finished_at - stream.last_token_at)
    counts["failed"] += args.connections - len(streams)
    wall = time.perf_counter() - started
    return {
        "mode": "slow",
        "connections": args.connections,
        "tokens_per_stream": args.tokens,
        "ramp_s": args.ramp,
        **counts,
        "streams_per_s": round(counts["completed"] / wall, 1),
        "tokens_per_s": round(len(gaps) / wall, 1),
        "errors": errors,
        "token_gap": summary_ms(gaps),
        "ttft": summary_ms(ttft),
        "tail": summary_ms(tails),
        "wall_s": round(wall, 2),
    }


async def one_connection(args: argparse.Namespace, target: Target) -> dict:
    """Send requests one after another on one connection; time each one."""
    started = time.perf_counter()
    measure_from = started + args.warmup
    measure_until = measure_from + args.duration
    first: list[float] = []
    total: list[float] = []
    failed = 0
    connection = await connect(target)
    for _ in range(1_000_000):  # bounded; the deadline ends it long before
        now = time.perf_counter()
        if now >= measure_until:
            break
        try:
            response = await asyncio.wait_for(connection.request(target.raw_request), 30)
        except Exception:
            failed += 1
            connection.close()
            connection = await connect(target)
            continue
        if now < measure_from:
            continue
        if response.status != 200:
            failed += 1
            continue
        assert response.done_at is not None and response.first_body_at is not None
        # Time to first token for a stream, to the first byte of the body for JSON.
        first_at = response.token_times[0] if response.token_times else response.first_body_at
        first.append(first_at - response.sent_at)
        total.append(response.done_at - response.sent_at)
    connection.close()
    return {
        "mode": "latency",
        "duration_s": args.duration,
        "requests": len(total),
        "failed": failed,
        "requests_per_s": round(len(total) / args.duration, 1),
        "first": summary_ms(first),
        "total": summary_ms(total),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("slow", "latency"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--auth", default="")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--ramp", type=float, default=3.0, help="seconds to open all streams")
    parser.add_argument("--tokens", type=int, default=260, help="tokens per slow stream")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring")
    parser.add_argument("--drain-timeout", type=float, default=20.0)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open(args.body_file, "rb") as file:
        target = build_target(args.url, file.read(), args.auth)
    run = slow_streams if args.mode == "slow" else one_connection
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(run(args, target))
    else:
        result = uvloop.run(run(args, target))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
