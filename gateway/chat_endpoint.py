"""`POST /v1/chat/completions`, served straight from ASGI.

This is the product's hot path, so it skips what it doesn't use: Django's ASGI handler builds
an `HttpRequest` (META, a spooled body file), runs the middleware chain and the URL resolver,
and ninja routes again; a response is then re-encoded header by header. Here the body is read
into memory (up to the 4 MiB limit, then only counted), the pipeline gets an `ApiRequest`, and
the response goes out as ASGI messages. What the API's middleware did is done here too: the
`X-Request-Id` header, the JSON envelope for any error (a wrong method, an unexpected
exception). The rest of `/v1/` stays on `gateway/asgi_handler.py`.

A client that disconnects cancels the request's task — and with it the generation, which
records the run as cancelled — exactly as Django's handler does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from django.conf import settings
from django.http import HttpResponse

from gateway import pipeline
from gateway.api_request import ApiRequest, RequestHeaders
from gateway.errors import MethodNotAllowed, MortarError
from gateway.middleware import request_id_from
from gateway.responses import error_response
from gateway.streaming import EventStream

logger = logging.getLogger(__name__)

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"

Scope = dict[str, Any]


async def read_body(receive: Any) -> tuple[bytes, int] | None:
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


def _encoded(headers: Any) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]


async def send_response(response: HttpResponse | EventStream, send: Any, request_id: str) -> None:
    if isinstance(response, EventStream):
        headers = _encoded(response.headers.items())
        headers.append((b"x-request-id", request_id.encode("latin-1")))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        # aclosing: a client that leaves mid-stream closes the events (and so the run) here.
        async with contextlib.aclosing(response.events) as events:
            async for data in events:
                await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    body = response.content
    headers = _encoded(response.items())
    headers.append((b"content-length", str(len(body)).encode()))
    headers.append((b"x-request-id", request_id.encode("latin-1")))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def respond(request: ApiRequest) -> HttpResponse | EventStream:
    try:
        return await pipeline.chat_completion(request)
    except MortarError as error:
        return error_response(error)
    except Exception:
        logger.exception("chat completion %s failed", request.request_id)
        return error_response(MortarError("The server failed to answer this request."))


async def chat_completions(scope: Scope, receive: Any, send: Any) -> None:
    headers = RequestHeaders(scope["headers"])
    request_id = request_id_from(headers)
    if scope["method"] != "POST":
        response = error_response(
            MethodNotAllowed(f"{scope['method']} {CHAT_COMPLETIONS_PATH}: Method Not Allowed.")
        )
        response["Allow"] = "POST"
        await send_response(response, send, request_id)
        return
    received = await read_body(receive)
    if received is None:
        return  # the client left mid-body: nothing was accepted
    body, size = received
    request = ApiRequest(body=body, body_size=size, headers=headers, request_id=request_id)

    task = asyncio.current_task()
    assert task is not None
    answered = False
    client_left = False

    async def cancel_when_the_client_leaves() -> None:
        nonlocal client_left
        # After the body, the next message is http.disconnect: the client left, or (uvicorn)
        # the response is complete.
        while (await receive())["type"] != "http.disconnect":
            pass
        if not answered:
            client_left = True
            task.cancel()

    listener = asyncio.get_running_loop().create_task(cancel_when_the_client_leaves())
    response: HttpResponse | EventStream | None = None
    try:
        response = await respond(request)
        await send_response(response, send, request_id)
    except asyncio.CancelledError:
        if not client_left:
            raise  # the server is shutting down
        task.uncancel()
    finally:
        answered = True
        listener.cancel()
        if isinstance(response, EventStream):
            # A stream the client left before it was read still has a run to close.
            await response.finished()
