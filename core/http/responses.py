"""Render Mortar's responses: JSON bodies, the error envelope, and event streams."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson
from django.http import HttpResponse, StreamingHttpResponse

from core.errors import MortarError
from core.http.envelopes import MORTAR_ENVELOPE, Envelope


def error_response(
    error: MortarError,
    headers: dict[str, str] | None = None,
    *,
    envelope: Envelope = MORTAR_ENVELOPE,
) -> HttpResponse:
    """The error in the route's envelope, with its status, and `Retry-After` when it says when
    to come back."""
    if error.retry_after is not None:
        headers = {**(headers or {}), "Retry-After": str(error.retry_after)}
    return HttpResponse(
        orjson.dumps(envelope.body(error)),
        status=error.status,
        content_type="application/json",
        headers=headers,
    )


def json_response(
    data: object, status: int = 200, headers: dict[str, str] | None = None
) -> HttpResponse:
    return HttpResponse(
        orjson.dumps(data), status=status, content_type="application/json", headers=headers
    )


class EventStreamResponse(StreamingHttpResponse):
    """A stream of server-sent events Mortar encoded itself (bytes, sent as they are).

    Whoever serves it (the API's dispatch, or an in-process caller that drains it) iterates it
    and calls `finished()` once the response is over. `on_finish` runs once, on the event loop —
    for a stream the client left before reading it all, that is what closes its run.
    """

    def __init__(
        self,
        events: AsyncGenerator[bytes, None],
        *,
        headers: dict[str, str],
        on_finish: Callable[[], None],
    ):
        super().__init__(events, content_type="text/event-stream", headers=headers)
        self["Cache-Control"] = "no-cache"
        self["X-Accel-Buffering"] = "no"
        self.events = events
        self._on_finish: Callable[[], None] | None = on_finish

    def __aiter__(self) -> AsyncIterator[bytes]:
        # The events themselves, not Django's per-part wrapper: closing what this returns
        # closes the stream.
        return self.events

    def finished(self) -> None:
        """The response is over (call on the event loop)."""
        on_finish, self._on_finish = self._on_finish, None
        if on_finish is not None:
            on_finish()


class DeferredResponse(HttpResponse):
    """An `HttpResponse` that is only built if something uses it.

    ninja makes a "temporal" response for every operation, for a view to set headers on or for
    a returned value to be rendered into; Mortar's operations return responses of their own,
    so it is thrown away — and building it was most of ninja's cost on the hot path. This one
    becomes a real `HttpResponse` the first time any of its attributes is read.
    """

    def __init__(self, content_type: str) -> None:
        self.__dict__["_deferred_content_type"] = content_type

    def __getattr__(self, name: str) -> Any:
        content_type = self.__dict__.pop("_deferred_content_type", None)
        if content_type is None:  # built already: the attribute does not exist
            raise AttributeError(name)
        HttpResponse.__init__(self, "", content_type=content_type)
        return getattr(self, name)
