"""A reader of GET /v1/telemetry/stream on a thread: what tests wait on to see a run's events."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import httpx

from tests.support.servers import ServerProcess
from tests.support.waiting import wait_until


class Subscriber:
    """Reads the telemetry stream on a thread, collecting (id, event) pairs."""

    def __init__(self, server: ServerProcess, secret: str, **params: str) -> None:
        self.events: list[tuple[str, dict]] = []
        self._stop = threading.Event()
        self._connected = threading.Event()
        headers = {"Authorization": f"Bearer {secret}"}
        if "last_event_id" in params:
            headers["Last-Event-ID"] = params.pop("last_event_id")
        self._thread = threading.Thread(
            target=self._read, args=(server, headers, params), daemon=True
        )
        self._thread.start()
        assert self._connected.wait(10)

    def _read(self, server: ServerProcess, headers: dict, params: dict) -> None:
        try:
            self._read_events(server, headers, params)
        except httpx.HTTPError:
            if not self._stop.is_set():
                raise

    def _read_events(self, server: ServerProcess, headers: dict, params: dict) -> None:
        with httpx.stream(
            "GET",
            f"{server.base_url}/v1/telemetry/stream",
            headers=headers,
            params=params,
            timeout=httpx.Timeout(5, read=30),
        ) as response:
            event_id = None
            for line in response.iter_lines():
                self._connected.set()
                if self._stop.is_set():
                    return
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    self.events.append((event_id, json.loads(line[6:])))

    def wait_for(self, predicate: Callable[[list[dict]], object], timeout: float = 10) -> None:
        wait_until(
            lambda: predicate([event for _, event in self.events]),
            timeout=timeout,
            message=lambda: f"not seen: {[e['type'] for _, e in self.events]}",
        )

    def first(self, event_type: str, timeout: float = 10) -> dict:
        """The first event of this type, once it has come."""

        def found() -> dict | None:
            return next((e for _, e in self.events if e["type"] == event_type), None)

        return wait_until(found, timeout=timeout, message=f"no {event_type} event")

    def close(self) -> None:
        self._stop.set()
