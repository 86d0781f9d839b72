"""A TCP proxy to Postgres that a test can cut: the database unreachable for one server process."""

from __future__ import annotations

import contextlib
import socket
import threading


class PostgresProxy:
    """A TCP proxy to Postgres that can be cut: every connection dropped, new ones refused."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.up = True
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if not self.up:
                client.close()  # the connection ends before Postgres ever answers
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink, pair), daemon=True).start()

    def _pump(
        self, source: socket.socket, sink: socket.socket, pair: tuple[socket.socket, ...]
    ) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(pair)  # type: ignore[arg-type]

    def _drop(self, pair: tuple[socket.socket, socket.socket]) -> None:
        with self._lock:
            self._pairs.discard(pair)
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def upstream_ports(self) -> list[int]:
        """The local ports of the proxy's connections to Postgres (its backends' client_port)."""
        with self._lock:
            pairs = list(self._pairs)
        ports = []
        for _, upstream in pairs:
            with contextlib.suppress(OSError):
                ports.append(upstream.getsockname()[1])
        return ports

    def cut(self) -> None:
        self.up = False
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair)

    def restore(self) -> None:
        self.up = True

    def close(self) -> None:
        self.listener.close()
        self.cut()
