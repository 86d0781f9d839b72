"""CORS for the API routes (`/v1/…`), so browsers can call them directly (Arkor reference,
"CORS"): any origin (`Access-Control-Allow-Origin: *`) or the ones `MORTAR_CORS_ORIGINS`
names, never credentials (keys travel in headers, not cookies), preflights answered here with
the methods and request headers the API reads, and the response headers a page may read
exposed. The dashboard and the admin (cookie sessions) get none: the wrapper is only put in
front of /v1/ (`config.asgi`).

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
# The request headers the API reads, and the attribution headers (Arkor, "CORS").
ALLOWED_HEADERS = (
    "Authorization",
    "Content-Type",
    "Accept",
    "x-api-key",
    "Last-Event-ID",
    "Idempotency-Key",
    "X-Request-Id",
    "anthropic-version",
    "anthropic-beta",
    "X-Mortar-Optimize",
    "X-Mortar-Tool-Select",
    "X-Mortar-Session",
    "X-Mortar-End-User-Id",
    "X-Mortar-Dedupe",
)
# Request headers allowed by prefix: Mortar's own, and those the OpenAI and Anthropic SDKs add
# about themselves (`x-stainless-os`, …); a browser's preflight names them one by one.
ALLOWED_HEADER_PREFIXES = ("x-mortar-", "x-stainless-")
EXPOSED_HEADERS = ", ".join(
    (
        "X-Request-Id",
        "request-id",
        "X-Mortar-Request-Id",
        "X-Mortar-Run-Id",
        "X-Mortar-Model",
        "X-Mortar-Deployment",
        "X-Mortar-Session",
        "X-Mortar-Optimizer",
        "X-Mortar-Tool-Selector",
        "X-Mortar-Dedupe",
        "X-Mortar-Upstream",
        "Retry-After",
        *(
            f"x-ratelimit-{part}-{unit}"
            for unit in ("requests", "tokens")
            for part in ("limit", "remaining", "reset")
        ),
    )
).encode()
PREFLIGHT_MAX_AGE = b"600"


def _header(headers: Sequence[tuple[bytes, bytes]], wanted: bytes) -> bytes | None:
    for name, value in headers:
        if name == wanted:
            return value
    return None


class Cors:
    """Wrap the API's ASGI app with CORS for the origins allowed (`*` for any)."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.any_origin = "*" in origins
        self.origins = frozenset(origin.encode("latin-1") for origin in origins)
        self.allowed_headers = frozenset(h.lower() for h in ALLOWED_HEADERS)

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
            if (
                name
                and name not in self.allowed_headers
                and name.startswith(ALLOWED_HEADER_PREFIXES)
            ):
                extra.append(name)
        return ", ".join([*ALLOWED_HEADERS, *extra]).encode("latin-1")

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
                        (b"access-control-expose-headers", EXPOSED_HEADERS),
                    ],
                }
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def preflight(
        self, allowed: list[tuple[bytes, bytes]], headers: list[tuple[bytes, bytes]], send: Send
    ) -> None:
        """Answer a preflight: 204 with the methods and headers the API takes (and the
        `X-Request-Id` every answer carries, PRODUCT.md decision 3)."""
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
