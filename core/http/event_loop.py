"""The event loop Mortar is served on: uvloop, taking every connection waiting to be accepted
each time its listening socket is ready, not one.

libuv accepts a single connection a pass of its loop since 1.45 (libuv/libuv#3696; uvloop 0.23
bundles 1.52): fine for an idle server, but a busy worker's pass lasts as long as the work that
was ready, and under the 1,000 slow streams (a pass of ~50 ms) Mortar took ~20 connections a
second while up to 275 waited in the kernel's accept queue: streams the client had sent at once
were first answered up to 12 s later, and the run was overloaded all that time
(`bench/results/accept-all-2026-12-06.md`). Here a listening socket is read as asyncio's own
loop reads it: up to `ACCEPT_BATCH` connections each time it is ready, each handed to uvloop as
an accepted socket.

Served with `uvicorn --loop core.http.event_loop:new_event_loop` (the Makefile, the Dockerfile,
docker compose and the benchmark do). Where the worker binds its own socket (one worker, uvicorn
given a host and port) it takes the waiting connections at once. A socket handed over (uvicorn's
`--workers N` share the supervisor's) keeps uvloop's own server, one connection a pass: every
worker is woken for a new connection, and one that took all that waited took wrk's 32
connections in every round of the benchmark, leaving its sibling idle; taking one at a time,
the idle worker takes its share, and a busy one takes fewer. TLS and Unix sockets keep uvloop's
own server too.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Any

import uvloop

logger = logging.getLogger(__name__)

# At most this many connections are taken each time a listening socket is ready (asyncio's
# loop takes its backlog, 100 by default): enough for any burst, and the loop's other work
# still comes round between batches.
ACCEPT_BATCH = 64
# Out of file descriptors: stop accepting for this long (asyncio's loop does the same), and let
# the connections wait in the kernel's queue, rather than spin on the error.
ACCEPT_PAUSE_S = 1.0
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop factory (`--loop core.http.event_loop:new_event_loop`)."""
    return AcceptingLoop()


class AcceptingLoop(uvloop.Loop):
    """uvloop's loop, serving a host and port it binds itself with `AcceptingServer`."""

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: ProtocolFactory,
        host: str | Sequence[str] | None = None,
        port: int | None = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        **options: Any,
    ) -> asyncio.AbstractServer:
        if (
            sock is not None
            or ssl is not None
            or options.get("reuse_port")
            or options.get("family")
        ):
            uvloops: Any = super().create_server  # its overloads cover one case each
            return await uvloops(  # type: ignore[no-any-return]
                protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl, **options
            )
        server = AcceptingServer(self, protocol_factory, await self._bound(host, port), backlog)
        if options.get("start_serving", True):
            await server.start_serving()
        return server

    async def _bound(
        self, host: str | Sequence[str] | None, port: int | None
    ) -> list[socket.socket]:
        """A socket bound to each address of `host` (every interface for None), as asyncio's
        `create_server` binds them."""
        hosts = [host] if host is None or isinstance(host, str) else list(host)
        addresses: set[tuple[Any, ...]] = set()
        for name in hosts:
            infos = await self.getaddrinfo(
                name or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            addresses.update(
                (family, kind, proto, address) for family, kind, proto, _, address in infos
            )
        sockets: list[socket.socket] = []
        try:
            for family, kind, proto, address in sorted(addresses, key=repr):
                listening = socket.socket(family, kind, proto)
                sockets.append(listening)
                listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    listening.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                listening.bind(address)
        except OSError:
            for listening in sockets:
                listening.close()
            raise
        return sockets


class AcceptingServer(asyncio.AbstractServer):
    """Listens on `sockets`, and serves each connection it accepts with a new protocol from
    `protocol_factory` on uvloop's transport — as uvloop's server would, but taking up to
    `ACCEPT_BATCH` connections each time a socket is ready."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol_factory: ProtocolFactory,
        sockets: list[socket.socket],
        backlog: int,
    ) -> None:
        self._loop = loop
        self._protocol_factory = protocol_factory
        self._sockets = sockets
        self._serving = False
        self._opening: set[asyncio.Task[Any]] = set()  # held: a task nothing holds may vanish
        for listening in sockets:
            listening.setblocking(False)
            listening.listen(backlog)  # connections queue in the kernel until it serves

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def _start(self) -> None:
        for listening in self._sockets:
            self._loop.add_reader(listening.fileno(), self._accept, listening)
        self._serving = True

    def _stop(self) -> None:
        for listening in self._sockets:
            self._loop.remove_reader(listening.fileno())
        self._serving = False

    def _accept(self, listening: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                connection, _ = listening.accept()
            except (BlockingIOError, InterruptedError):
                return  # none left: the next one wakes the reader again
            except ConnectionAbortedError:
                continue  # the client gave up while it waited
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                logger.error("not accepting connections for %.0f s: %s", ACCEPT_PAUSE_S, exc)
                self._stop()
                self._loop.call_later(ACCEPT_PAUSE_S, self._resume)
                return
            connection.setblocking(False)
            opening = self._loop.create_task(self._serve(connection))
            self._opening.add(opening)
            opening.add_done_callback(self._opening.discard)

    def _resume(self) -> None:
        if not self._serving and all(s.fileno() != -1 for s in self._sockets):
            self._start()

    async def _serve(self, connection: socket.socket) -> None:
        handed_over = False

        def protocol() -> asyncio.BaseProtocol:
            nonlocal handed_over
            made = self._protocol_factory()
            handed_over = True  # from here uvloop's transport owns the socket, and closes it
            return made

        try:
            await self._loop.connect_accepted_socket(protocol, connection)
        except Exception:  # no protocol for it, or it went away while it was set up
            logger.warning("an accepted connection could not be served", exc_info=True)
            if not handed_over:
                connection.close()

    def close(self) -> None:
        if self._serving:
            self._stop()
        for listening in self._sockets:
            listening.close()

    async def wait_closed(self) -> None:
        # Nothing to wait for: the connections are the server's owner's to close (uvicorn closes
        # them before it waits here).
        return None

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        if not self._serving:
            self._start()

    async def serve_forever(self) -> None:
        await self.start_serving()
        await asyncio.get_running_loop().create_future()  # until cancelled
