"""httpx's transport to the model servers: each request sent on aiohttp's connection pool.

httpx-aiohttp's `AiohttpTransport` does the same, and this keeps its exception mapping and its
response stream; what differs is what a request costs on the way (`bench/upstream_client_bench.py`):
its timeouts become an aiohttp `ClientTimeout` once, not per request; its headers are handed to
aiohttp as one plain dictionary, not as httpx's `Headers`, which decode every header on each
lookup; and the aiohttp response travels up as the httpx response's `aiohttp_response`
extension, so the relay reads the model server's stream from aiohttp's reader without reaching
into private attributes.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx
from httpx_aiohttp.transport import AiohttpResponseStream, map_aiohttp_exceptions

# The httpx response's extension that holds aiohttp's response under it.
AIOHTTP_RESPONSE = "aiohttp_response"

TimeoutKey = tuple[float | None, float | None, float | None]


class ModelServerTransport(httpx.AsyncBaseTransport):
    """Send httpx requests on one aiohttp session (its pool of keep-alive connections)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self._timeouts: dict[TimeoutKey, aiohttp.ClientTimeout] = {}

    def _timeout(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        """httpx's per-request timeouts as aiohttp's: connect (to open a connection), read (a
        socket read: the wait for the first byte, and between chunks), pool (to get one)."""
        seconds: dict[str, Any] = request.extensions.get("timeout", {})
        key = (seconds.get("connect"), seconds.get("read"), seconds.get("pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = self._timeouts[key] = aiohttp.ClientTimeout(
                sock_connect=key[0], sock_read=key[1], connect=key[2]
            )
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with map_aiohttp_exceptions():
            response = await self.session.request(
                request.method,
                str(request.url),
                # As httpx-aiohttp's: lower-case names, httpx's order.
                headers=dict(request.headers.items()),
                # A body Mortar sends is bytes, read already (the chat request as it is stored).
                data=request.content or None,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=self._timeout(request),
            )
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1", AIOHTTP_RESPONSE: response}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=AiohttpResponseStream(response),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        await self.session.close()


def aiohttp_response(response: httpx.Response) -> aiohttp.ClientResponse:
    """The aiohttp response under an httpx response this transport made."""
    return response.extensions[AIOHTTP_RESPONSE]  # type: ignore[no-any-return]
