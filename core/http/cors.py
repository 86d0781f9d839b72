"""CORS for an ASGI app, so browsers can call it directly: any origin
(`Access-Control-Allow-Origin: *`) or the ones allowed, never credentials (keys travel in
headers, not cookies), preflights answered here with the methods and the request headers the
caller allows, and the response headers it names exposed. config puts it in front of the API
only: the dashboard and the admin (cookie sessions) get none.

An ASGI wrapper rather than Django middleware (django-cors-headers): the API skips Django's
handler and its middleware (`core.http.dispatch`). A request without an `Origin` header (every
SDK outside a browser) costs a scan of its header list and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.http.asgi import ASGIApp, Receive, Scope, Send
from core.http.requests import RequestHeaders, request_id_from

ALLOWED_METHODS = "GET, POST, DELETE, OPTIONS"
PREFLIGHT_MAX_AGE = b"600"


def _header(headers: Sequence[tuple[bytes, bytes]], wanted: bytes) -> bytes | None:
    for name, value in headers:
        if name == wanted:
            return value
    return None


class Cors:
    """Wrap an ASGI app with CORS for the origins allowed (`*` for any): the request headers
    `allow_headers` names (and any that starts with one of `allow_header_prefixes`) may be sent,
    the response headers `expose_headers` names may be read."""

    def __init__(
        self,
        app: ASGIApp,
        origins: Sequence[str],
        *,
        allow_headers: Sequence[str],
        allow_header_prefixes: Sequence[str] = (),
        expose_headers: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.any_origin = "*" in origins
        self.origins = frozenset(origin.encode("latin-1") for origin in origins)
        self.header_list = tuple(allow_headers)
        self.header_names = frozenset(h.lower() for h in allow_headers)
        self.header_prefixes = tuple(prefix.lower() for prefix in allow_header_prefixes)
        self.exposed = ", ".join(expose_headers).encode("latin-1")

    def allow_origin(self, origin: bytes) -> list[tuple[bytes, bytes]] | None:
        """The `Access-Control-Allow-Origin` headers for `origin`, None if it is not allowed."""
        if self.any_origin:
            return [(b"access-control-allow-origin", b"*")]
        if origin in self.origins:
            return [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]
        return None

    def allow_headers(self, requested: bytes | None) -> bytes:
        """The request headers allowed: the list, and those requested that a prefix allows."""
        extra = []
        for name in (requested or b"").decode("latin-1").split(","):
            name = name.strip().lower()
            if name and name not in self.header_names and name.startswith(self.header_prefixes):
                extra.append(name)
        return ", ".join([*self.header_list, *extra]).encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope["headers"]
        origin = _header(headers, b"origin")
        allowed = None if origin is None else self.allow_origin(origin)
        if allowed is None:
            return await self.app(scope, receive, send)
        if scope["method"] == "OPTIONS" and _header(headers, b"access-control-request-method"):
            await self.preflight(allowed, headers, send)
            return

        async def send_with_cors(message: Mapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [
                        *message.get("headers", ()),
                        *allowed,
                        (b"access-control-expose-headers", self.exposed),
                    ],
                }
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def preflight(
        self, allowed: list[tuple[bytes, bytes]], headers: list[tuple[bytes, bytes]], send: Send
    ) -> None:
        """Answer a preflight: 204 with the methods and headers allowed (and the `X-Request-Id`
        every answer carries)."""
        requested = _header(headers, b"access-control-request-headers")
        request_id = request_id_from(RequestHeaders(headers))
        await send(
            {
                "type": "http.response.start",
                "status": 204,
                "headers": [
                    *allowed,
                    (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
                    (b"access-control-allow-headers", self.allow_headers(requested)),
                    (b"access-control-max-age", PREFLIGHT_MAX_AGE),
                    (b"x-request-id", request_id.encode("latin-1")),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})
