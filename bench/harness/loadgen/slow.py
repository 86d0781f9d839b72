"""The slow streams: many long streams open at once, one per connection, every token of each
timed as cheaply as the client can (it shares its core with the mock model server)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any, cast

from ..stats import summary_ms
from .connection import CONNECT_ATTEMPTS, TOKEN_MARKERS, Endpoint

# A stream stalls when the next token takes longer than this (20 drip intervals of 50 ms).
STALL_GAP_S = 1.0


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
        # A stream's protocol is given a stream transport (typed as the base class).
        self.transport = cast(asyncio.Transport, transport)

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


async def slow_streams(args: argparse.Namespace, endpoint: Endpoint) -> dict[str, Any]:
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
                    loop.create_connection(lambda: stream, endpoint.host, endpoint.port), 10
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
        stream.transport.write(endpoint.raw_request)
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
