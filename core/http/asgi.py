"""The lean ASGI dispatch: one hot API route served straight from ASGI, into its ninja operation.

Django's ASGI handler costs the hot path (`POST /v1/chat/completions`) what it does not use: a
`ThreadSensitiveContext`, the request signals and the whole middleware chain, each run through
`sync_to_async` (about a dozen thread hops a request), an `HttpRequest` with its META and a
spooled body file, and the URL resolver. Here the body is read into memory (up to the 4 MiB
limit, then only counted), an `ApiRequest` is built, and the path's ninja view — resolved once by
Django's resolver — is called with it: the same operation, auth, pipeline and exception handlers
Django's handler would reach, so an answer is the same on either path. What the API's middleware
does is done here by the same functions: the `X-Request-Id` header and the JSON envelope for any
error (a wrong method, an unexpected exception).

Nothing here touches the database; what the operation reads goes through `core.db`, which keeps
the connection hygiene Django's request signals would.

A client that disconnects cancels the request's task — and with it the generation, which
records the run as cancelled — exactly as Django's handler does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings
from django.http import HttpResponse, HttpResponseBase
from django.urls import resolve

from core.errors import MortarError
from core.http.middleware import as_json_error
from core.http.requests import ApiRequest, RequestHeaders, request_id_from
from core.http.responses import EventStreamResponse, error_response

logger = logging.getLogger(__name__)

# ASGI's callables, as Django's handler types them.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
View = Callable[[Any], Awaitable[HttpResponseBase]]


async def read_body(receive: Receive) -> tuple[bytes, int] | None:
    """The body, kept up to one byte past the limit, and its full size; None if the client
    left before sending it all."""
    keep = settings.MORTAR_MAX_BODY_BYTES + 1
    parts: list[bytes] = []
    kept = size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        part = message.get("body", b"")
        size += len(part)
        if kept < keep:
            part = part[: keep - kept]
            parts.append(part)
            kept += len(part)
        if not message.get("more_body", False):
            break
    return (parts[0] if len(parts) == 1 else b"".join(parts)), size


def _encoded(response: HttpResponseBase, request_id: str) -> list[tuple[bytes, bytes]]:
    headers = [
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()
    ]
    headers.append((b"x-request-id", request_id.encode("latin-1")))
    return headers


async def send_response(response: HttpResponseBase, send: Send, request_id: str) -> None:
    if isinstance(response, EventStreamResponse):
        start = {"type": "http.response.start", "status": response.status_code}
        await send({**start, "headers": _encoded(response, request_id)})
        # aclosing: a client that leaves mid-stream closes the events (and so the run) here.
        async with contextlib.aclosing(response.events) as events:
            async for data in events:
                await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    assert isinstance(response, HttpResponse)
    body = response.content
    headers = _encoded(response, request_id)
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class LeanDispatch:
    """Serve `path` from ASGI into the ninja view Django's resolver finds for it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._view: View | None = None

    def view(self) -> View:
        if self._view is None:
            self._view = resolve(self.path).func
        return self._view

    async def respond(self, request: ApiRequest) -> HttpResponseBase:
        try:
            response = await self.view()(request)
        except Exception:
            logger.exception("%s %s failed", request.method, request.path)
            response = error_response(MortarError("The server failed to answer this request."))
        return as_json_error(request.method, request.path, response)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = RequestHeaders(scope["headers"])
        request_id = request_id_from(headers)
        received = await read_body(receive)
        if received is None:
            return  # the client left mid-body: nothing was accepted
        body, size = received
        request = ApiRequest(
            method=scope["method"],
            path=scope["path"],
            body=body,
            body_size=size,
            headers=headers,
            request_id=request_id,
        )

        task = asyncio.current_task()
        assert task is not None
        answered = False
        client_left = False

        async def cancel_when_the_client_leaves() -> None:
            nonlocal client_left
            # After the body, the next message is http.disconnect: the client left, or
            # (uvicorn) the response is complete.
            while (await receive())["type"] != "http.disconnect":
                pass
            if not answered:
                client_left = True
                task.cancel()

        listener = asyncio.get_running_loop().create_task(cancel_when_the_client_leaves())
        response: HttpResponseBase | None = None
        try:
            response = await self.respond(request)
            await send_response(response, send, request_id)
        except asyncio.CancelledError:
            if not client_left:
                raise  # the server is shutting down
            task.uncancel()
        finally:
            answered = True
            listener.cancel()
            if isinstance(response, EventStreamResponse):
                # A stream the client left before it was read still has a run to close.
                response.finished()
