"""`core.http.event_loop`: the loop Mortar is served on takes every waiting connection when its
listening socket is ready, where uvloop's own server (libuv ≥ 1.45) takes one a pass of the loop.

Real sockets on loopback and real loops; the clients connect with blocking sockets before the
loop runs, so the connections wait in the kernel's accept queue as a burst of clients' would.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from core.http.event_loop import AcceptingServer, new_event_loop

BURST = 40


class Counted(asyncio.Protocol):
    """Counts the connections made; answers each byte it gets with "ok"."""

    made: list[asyncio.BaseTransport]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.append(transport)
        self.transport: Any = transport  # uvloop's TCPTransport, not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(b"ok")


def run(main: Callable[[], Coroutine[Any, Any, Any]], loop_factory: Callable[[], Any]) -> Any:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main())


def passes_to_serve_a_burst(loop_factory: Callable[[], Any], *, handed_over: bool = False) -> int:
    """Passes of the loop until `BURST` connections that were waiting are all made; on a socket
    the server binds, or on one `handed_over` as uvicorn's workers get theirs."""

    async def main() -> int:
        made: list[asyncio.BaseTransport] = []
        protocol = type("P", (Counted,), {"made": made})
        loop = asyncio.get_running_loop()
        if handed_over:
            shared = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            shared.bind(("127.0.0.1", 0))
            server = await loop.create_server(protocol, sock=shared, backlog=BURST * 2)
        else:
            server = await loop.create_server(protocol, "127.0.0.1", 0, backlog=BURST * 2)
        port = server.sockets[0].getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(BURST)]
        try:
            passes = 0
            while len(made) < BURST and passes < BURST * 10:
                await asyncio.sleep(0)
                passes += 1
            assert len(made) == BURST
            return passes
        finally:
            for client in clients:
                client.close()
            for transport in made:
                transport.close()
            server.close()
            await server.wait_closed()

    return run(main, loop_factory)  # type: ignore[no-any-return]


def test_a_burst_of_waiting_connections_is_taken_in_a_few_passes_of_the_loop() -> None:
    ours = passes_to_serve_a_burst(new_event_loop)
    assert ours <= 4
    # Why the loop is Mortar's own: uvloop's server takes one connection a pass, so on a busy
    # worker (a pass of ~50 ms) a burst waits in the kernel's queue for seconds.
    assert passes_to_serve_a_burst(uvloop.new_event_loop) >= BURST


def test_a_socket_the_workers_share_is_taken_from_one_connection_a_pass() -> None:
    # uvicorn's `--workers N` hand each worker the supervisor's socket: all are woken for a
    # connection, and one taking every waiting connection would leave its siblings idle.
    assert passes_to_serve_a_burst(new_event_loop, handed_over=True) >= BURST


def test_connections_are_served_by_the_protocol_and_the_server_closes() -> None:
    async def main() -> None:
        made: list[asyncio.BaseTransport] = []
        protocol = type("P", (Counted,), {"made": made})
        loop = asyncio.get_running_loop()
        server = await loop.create_server(protocol, "127.0.0.1", 0)
        assert isinstance(server, AcceptingServer) and server.is_serving()
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"?")
        assert await reader.readexactly(2) == b"ok"
        writer.close()
        server.close()
        await server.wait_closed()
        assert not server.is_serving()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)

    run(main, new_event_loop)


def test_a_server_made_not_serving_takes_connections_only_once_it_starts() -> None:
    async def main() -> None:
        made: list[asyncio.BaseTransport] = []
        protocol = type("P", (Counted,), {"made": made})
        server = await asyncio.get_running_loop().create_server(
            protocol, "127.0.0.1", 0, start_serving=False
        )
        assert not server.is_serving()
        port = server.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))  # waits in the kernel's queue
        for _ in range(5):
            await asyncio.sleep(0)
        assert made == []
        await server.start_serving()
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(made) == 1
        client.close()
        made[0].close()
        server.close()

    run(main, new_event_loop)


def test_a_connection_that_cannot_be_served_is_closed_and_the_server_goes_on() -> None:
    async def main() -> None:
        made: list[asyncio.BaseTransport] = []
        counted = type("P", (Counted,), {"made": made})
        calls = 0

        def protocol() -> asyncio.Protocol:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("no protocol for the first connection")
            made_protocol: asyncio.Protocol = counted()
            return made_protocol

        server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        first_reader, first_writer = await asyncio.open_connection("127.0.0.1", port)
        assert await first_reader.read() == b""  # closed, not left hanging
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"?")
        assert await reader.readexactly(2) == b"ok"
        for stream in (first_writer, writer):
            stream.close()
        server.close()

    run(main, new_event_loop)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", {"127.0.0.1"}),
        (["127.0.0.1"], {"127.0.0.1"}),
        ("0.0.0.0", {"0.0.0.0"}),  # every interface, as `make serve` may bind
    ],
)
def test_hosts_are_bound_as_asyncio_binds_them(host: str | list[str], expected: set[str]) -> None:
    async def main() -> set[str]:
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, host, 0)
        bound = {s.getsockname()[0] for s in server.sockets}
        server.close()
        return bound

    assert run(main, new_event_loop) == expected


def test_an_address_in_use_is_refused_and_nothing_is_left_open() -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]

    async def main() -> None:
        with pytest.raises(OSError, match="in use"):
            await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", port)

    try:
        run(main, new_event_loop)
    finally:
        taken.close()


# Run in a process of its own: it lowers the process's limit on open files.
OUT_OF_FILES = textwrap.dedent(
    """
    import asyncio, logging, os, resource, socket, sys
    from core.http.event_loop import new_event_loop
    logging.basicConfig(level=logging.ERROR, stream=sys.stdout, format="%(message)s")
    made = []
    class Counted(asyncio.Protocol):
        def connection_made(self, transport):
            made.append(transport)
    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Counted, "127.0.0.1", 0, backlog=100)
        port = server.sockets[0].getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 3, hard))
        await asyncio.sleep(0.3)
        print("made while out of files:", len(made))
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        await asyncio.sleep(1.5)
        print("made after:", len(made))
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(main())
    """
)


def test_out_of_files_it_pauses_accepting_and_takes_the_rest_later() -> None:
    done = subprocess.run(
        [sys.executable, "-c", OUT_OF_FILES],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert "not accepting connections for 1 s: [Errno 24] Too many open files" in lines
    made_while_out = int(lines[-2].rsplit(" ", 1)[1])
    assert 0 < made_while_out < 10  # it served what it could, and did not spin or fail
    assert lines[-1] == "made after: 10"  # once files were free again, the rest were taken
