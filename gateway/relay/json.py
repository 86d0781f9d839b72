"""Relay a generation as one JSON body (`stream: false`), recording it as the run's one chunk."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from django.http import HttpResponse

from core.errors import MortarError
from core.flags import Flag
from core.http.responses import error_response
from core.tracing import step
from gateway.relay.relay import STOPPED_FINISH_REASON, Relay
from telemetry.models import Run


class CancelOnStop:
    """Inside the block, cancel the running task as soon as `stop` is set; the block then ends
    quietly with `stopped` true. A cancellation from anywhere else goes on as usual."""

    def __init__(self, stop: Flag | None):
        self.stop = stop
        self.stopped = False
        self._inside = False
        self._task: asyncio.Task[Any] | None = None
        self._stop_listening: Callable[[], None] | None = None

    def __enter__(self) -> CancelOnStop:
        if self.stop is not None:
            self._task = asyncio.current_task()
            self._inside = True
            # Through the loop, as an event's waiter would be: a cancellation already on its way
            # to the task is seen first, and then the block is over.
            loop = asyncio.get_running_loop()
            self._stop_listening = self.stop.listen(lambda: loop.call_soon(self._on_stop))
        return self

    def _on_stop(self) -> None:
        if self._inside and self._task is not None:
            self.stopped = True
            self._task.cancel()

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        self._inside = False
        # Let go of the listener and the task: the listener refers back to this object, which
        # made it and the task (with everything the request's frames hold) a reference cycle
        # that only the garbage collector could free.
        stop_listening, self._stop_listening = self._stop_listening, None
        task, self._task = self._task, None
        if stop_listening is not None:
            stop_listening()
        if self.stopped and kind is asyncio.CancelledError and task is not None:
            return task.uncancel() == 0  # swallow our own cancel, and only ours
        return False


async def json_response(relay: Relay) -> HttpResponse:
    """Run the generation to its end — or its stop — and answer with one object.

    The deltas are read in this task, without `watch`: there are no pings to send while the
    model is silent, and a stop cancels the read itself."""
    status = Run.Status.COMPLETED
    try:
        with CancelOnStop(relay.stop) as stopping, step("relay"):
            async for _ in relay.deltas:
                relay.run.first_token()
        if stopping.stopped:
            # What was generated so far, with finish_reason "stopped" (docs/api/runs.md).
            status = Run.Status.STOPPED
            relay.generation.finish_reason = STOPPED_FINISH_REASON
        usage = relay.usage()
        body = relay.rendering.body(relay.generation, usage.counts)
        # Closed before the awaits below: a client that leaves during them must not leave the
        # run in progress.
        relay.run.chunk(body)
        relay.close_run(status, http_status=200, usage=usage)
        await relay.run.settled()
        return HttpResponse(body, content_type="application/json", headers=relay.headers)
    except asyncio.CancelledError:
        relay.close_run(Run.Status.CANCELLED, http_status=499, error_code="client_disconnected")
        raise
    except MortarError as error:
        response = error_response(error, relay.headers, envelope=relay.envelope)
        relay.run.chunk(response.content)
        relay.close_run(
            Run.Status.FAILED,
            http_status=error.status,
            error_code=error.code,
            error_message=error.message,
        )
        await relay.run.settled()
        return response
    finally:
        await relay.deltas.aclose()
        relay.end()
