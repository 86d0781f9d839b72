"""ASGI plumbing: the callables' types, reading a request's body, and sending a Django response.

`core.http.dispatch` serves the API with these; the CORS and tracing wrappers type themselves
with the same callables.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse

# ASGI's callables, as Django's handler types them.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def read_body(receive: Receive, limit: int) -> tuple[bytes, int] | None:
    """The body, kept up to one byte past `limit`, and its full size; None if the client left
    before sending it all."""
    keep = limit + 1
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


def _encoded(
    response: HttpResponseBase, extra: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    headers = [
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()
    ]
    headers.extend(extra)
    if response.cookies:
        headers.extend(
            (b"set-cookie", cookie.output(header="").encode("latin-1").strip())
            for cookie in response.cookies.values()
        )
    return headers


async def send_response(
    response: HttpResponseBase, send: Send, extra_headers: list[tuple[bytes, bytes]]
) -> None:
    """Send `response` with `extra_headers` added: a streaming one part by part as its parts
    come (never gathered first), any other whole, with its `Content-Length`."""
    if isinstance(response, StreamingHttpResponse):
        start = {"type": "http.response.start", "status": response.status_code}
        await send({**start, "headers": _encoded(response, extra_headers)})
        parts = aiter(response)
        try:
            async for part in parts:
                await send({"type": "http.response.body", "body": part, "more_body": True})
        finally:
            # A client that leaves mid-stream closes the parts (and what makes them) here.
            aclose = getattr(parts, "aclose", None)
            if aclose is not None:
                await aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    assert isinstance(response, HttpResponse)
    body = response.content
    headers = _encoded(response, extra_headers)
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
