"""How fast a busy worker's loop takes a burst of new connections: Mortar's own loop
(`core/http/event_loop.py`) against uvloop's, side by side.

A server whose loop spends `--busy-ms` of CPU in every pass (as a worker relaying many streams
does) answers `--connections` clients that all connect at once; it prints how long until the
last one was answered, and how many passes of the loop that took. uvloop's server (libuv ≥ 1.45)
accepts one connection a pass; Mortar's takes every waiting one.

    .venv/bin/python bench/accept_bench.py [--connections 300] [--busy-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.http.event_loop import new_event_loop


class Answer(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


async def burst(connections: int, busy_s: float) -> tuple[float, int]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Answer, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    passes = 0

    def busy() -> None:  # one callback a pass, holding the loop for busy_s
        nonlocal passes
        passes += 1
        until = time.perf_counter() + busy_s
        while time.perf_counter() < until:
            pass
        loop.call_soon(busy)

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        await reader.readuntil(b"ok")
        writer.close()

    handle = loop.call_soon(busy)
    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(connections)))
    seconds = time.perf_counter() - started
    handle.cancel()
    server.close()
    return seconds, passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--busy-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    loops: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "mortar (core.http.event_loop)": new_event_loop,
        "uvloop": uvloop.new_event_loop,
    }
    print(f"{args.connections} connections at once, the loop busy {args.busy_ms:g} ms a pass")
    for round_ in range(1, args.rounds + 1):
        for name, factory in loops.items():
            with asyncio.Runner(loop_factory=factory) as runner:
                seconds, passes = runner.run(burst(args.connections, args.busy_ms / 1000))
            print(f"  round {round_}  {name:30s} all answered in {seconds:6.2f} s, {passes} passes")


if __name__ == "__main__":
    main()
