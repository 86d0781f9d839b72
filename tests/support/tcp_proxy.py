"""A TCP proxy on loopback that a test cuts and restores: a network fault between Mortar and
Redis (or anything else), real at the socket level.

Cut, it closes every connection it carries and refuses new ones (its port is closed); restored,
it accepts again on the same port. It runs on threads, so the test's own code stays
synchronous.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.servers import free_port


class TcpProxy:
    """Forward 127.0.0.1:`port` to `target_host`:`target_port` while not cut."""

    def __init__(self, target_host: str, target_port: int, *, cut: bool = False) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        if not cut:
            self.restore()

    def url(self, scheme: str = "redis", path: str = "") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def restore(self) -> None:
        """Accept and forward connections again."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(128)
            self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def cut(self) -> None:
        """Close every connection, and the port: new connections are refused."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, set()
        if listener is not None:
            # shutdown() wakes the thread blocked in accept(); close() alone may not.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in connections:
            _close(sock)
        if self._accepting is not None:
            self._accepting.join(5)

    def close(self) -> None:
        self.cut()

    def upstream_addresses(self) -> set[str]:
        """`host:port` of each connection's far side as the target sees it (Redis' CLIENT
        LIST `addr`): how a test tells this proxy's clients from others."""
        with self._lock:
            return {
                "{}:{}".format(*sock.getsockname()[:2])
                for sock in self._connections
                if _peer(sock) == self.target
            }

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    _close(client)
                    _close(upstream)
                    return
                self._connections.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._connections.discard(source)
                self._connections.discard(sink)
            _close(source)
            _close(sink)


def _peer(sock: socket.socket) -> tuple[str, int] | None:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return None
    return host, port


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
