"""The one outbound seam: pooled HTTP clients for model servers, and their errors as Mortar's.

One keep-alive `httpx.AsyncClient` per replica (and event loop), never one per request. A
model server's reply is read as server-sent events and handed on as parsed chunk objects;
httpx's exceptions become `UpstreamUnavailable` (could not connect), `UpstreamTimeout` and
`UpstreamError` (a broken stream, garbage, a 5xx), and a 4xx becomes `UpstreamRejected`.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import logging
import math
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import orjson
from httpx_aiohttp.transport import map_aiohttp_exceptions

from core.loops import PerLoop
from core.tracing import inject_trace
from gateway.errors import (
    UpstreamError,
    UpstreamOverloaded,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.models import Deployment
from gateway.upstream.event_data import EventData
from gateway.upstream.replicas import replica_name
from gateway.upstream.transport import ModelServerTransport, aiohttp_response

logger = logging.getLogger(__name__)

ERROR_BODY_LIMIT = 64 * 1024
KEEPALIVE_SECONDS = 60.0
# What a closed reply's body reads as (`UpstreamStream.aclose`): nothing.
_CLOSED_BODY = httpx.ByteStream(b"")


@dataclass(frozen=True)
class ReplicaConfig:
    """Everything a client for one replica depends on; a changed deployment gets a new one."""

    base_url: str
    name: str  # what clients are told (`replica_name`): the URL is for operators only
    api_key: str
    connect_timeout: float
    read_timeout: float

    @classmethod
    def for_deployment(cls, deployment: Deployment, base_url: str) -> ReplicaConfig:
        api_key = os.environ.get(deployment.api_key_env, "") if deployment.api_key_env else ""
        return cls(
            base_url=base_url.rstrip("/"),
            name=replica_name(deployment.name, deployment.upstreams, base_url),
            api_key=api_key,
            connect_timeout=deployment.connect_timeout_s,
            # The socket read timeout covers both waits; where the wait between chunks is
            # the shorter one, the relay adds its own timer (`relay_chunks`).
            read_timeout=max(deployment.first_byte_timeout_s, deployment.chunk_timeout_s),
        )


# Each loop's clients, one per replica configuration.
_clients: PerLoop[dict[ReplicaConfig, ModelServerClient]] = PerLoop(dict)
_completions_urls: dict[str, httpx.URL] = {}


def completions_url(base_url: str) -> httpx.URL:
    """The replica's chat-completions URL, parsed once (httpx parses and quotes a URL string
    on every request)."""
    url = _completions_urls.get(base_url)
    if url is None:
        url = _completions_urls[base_url] = httpx.URL(f"{base_url}/chat/completions")
    return url


class NoCookies(httpx.Cookies):
    """Cookies that are never kept: a model server's cookie must never ride along on another
    organization's request.

    Not even looked at: httpx hands every response to its client's cookies, and reading one
    (an urllib request and an email message built from the response's headers, then the jar's
    policy) cost 0.06 to 0.16 ms of CPU a request, for nothing kept
    (`bench/results/no-cookies-ab-2026-12-04.md`). The jar under it refuses every cookie all
    the same.
    """

    def __init__(self) -> None:
        super().__init__(
            http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        )

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class ModelServerClient(httpx.AsyncClient):
    """httpx's client with `NoCookies`, whatever it is given (httpx copies a client's cookies
    into a plain `Cookies`, so a subclass is the way to keep them from being read), and the
    chat request built from what every one of them shares."""

    _no_cookies = NoCookies()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # What `build_request` would merge on every request (the client's headers, ours, its
        # timeouts), merged once: httpx's `Headers` decode every header on each lookup. (A
        # client's headers are set when it is made, never after: `client_for`.)
        self._chat_headers = httpx.Headers(self.headers)
        self._chat_headers.update(
            {"Content-Type": "application/json", "Accept": "text/event-stream"}
        )
        self._chat_timeout = self.timeout.as_dict()

    def chat_request(self, url: httpx.URL, body: bytes) -> httpx.Request:
        """The POST of a chat request's body, as `build_request` would make it."""
        headers = self._chat_headers
        trace: dict[str, str] = {}
        inject_trace(trace)  # the client's trace goes on to the model server (when tracing)
        if trace:
            headers = httpx.Headers(headers)
            headers.update(trace)
        return httpx.Request(
            "POST", url, headers=headers, content=body, extensions={"timeout": self._chat_timeout}
        )

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        pass


def client_for(config: ReplicaConfig) -> ModelServerClient:
    clients = _clients()
    client = clients.get(config)
    if client is None:
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        # httpx's API over aiohttp's connection pool (`transport.py`): httpx's own pool polls
        # every idle connection on each request (2-3 ms at 32 connections, measured);
        # aiohttp's doesn't.
        # No connection limit: a thousand slow streams must not queue behind a hundred.
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_SECONDS),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        client = clients[config] = ModelServerClient(
            base_url=config.base_url,
            headers=headers,
            timeout=httpx.Timeout(
                connect=config.connect_timeout,
                read=config.read_timeout,
                write=config.connect_timeout,
                pool=config.connect_timeout,
            ),
            transport=ModelServerTransport(session),
        )
    return client


async def close_clients() -> None:
    clients = _clients.pop() or {}
    for client in clients.values():
        await client.aclose()


class UpstreamStream:
    """An open streaming reply from one replica; iterate it for chunk objects."""

    def __init__(self, response: httpx.Response):
        self.response = response
        self._aiohttp = aiohttp_response(response)
        self._silence = "The model server stopped sending."

    def wait_between_chunks(self, seconds: float) -> None:
        """From now on, time the reply out after `seconds` without a byte from the model server.

        It is the socket's read timeout (aiohttp's, which measures the peer and cancels no
        task), not a timer around each read: the relay steps a read by hand in the client's
        task between its writes (`gateway/relay/watch.py`), where a timer that cancels the
        task would land in whatever the task does then.
        """
        self._silence = "The model server took too long between chunks."
        connection = self._aiohttp.connection
        if connection is not None and connection.protocol is not None:  # else: all read
            connection.protocol.read_timeout = seconds
            connection.protocol.start_timeout()

    async def chunks(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The chunk objects, a list per read of the model server's stream (never empty)."""
        try:
            # aiohttp's headers: httpx's decode all of them to find one.
            if self._aiohttp.headers.get("Content-Type", "").startswith("application/json"):
                # A server that answered a streaming request with one JSON object.
                yield [_completion_as_chunk(_json(await self.response.aread()))]
                return
            done = False
            events = EventData()
            # aiohttp's reader itself, not httpx's `aiter_raw()`: under that are three async
            # generators (httpx's, its bound stream's, httpx-aiohttp's) and aiohttp's chunk
            # iterator, each passed twice a chunk. aiohttp's errors become httpx's, as
            # httpx-aiohttp's stream would turn them.
            body = self._aiohttp.content
            with map_aiohttp_exceptions():
                while piece := await body.readany():
                    batch = events.feed(piece)
                    if done or not batch:
                        continue  # after [DONE], read on to the end so the connection is reused
                    chunks: list[dict[str, Any]] = []
                    for data in batch:
                        if data == b"[DONE]":
                            done = True
                            break
                        try:
                            chunk = _json(data)
                            if "error" in chunk and "choices" not in chunk:
                                raise UpstreamError(f"The model server failed: {_message(chunk)}")
                        except UpstreamError:
                            if chunks:
                                yield chunks  # what came before the fault is relayed first
                            raise
                        chunks.append(chunk)
                    if chunks:
                        yield chunks
            if not done:
                raise UpstreamError("The model server closed the stream before it was complete.")
        except httpx.TimeoutException:
            raise UpstreamTimeout(self._silence) from None
        except httpx.TransportError as exc:
            logger.warning("model server stream broke: %r", exc)  # its text may hold the URL
            raise UpstreamError(
                f"The connection to the model server broke ({exc.__class__.__name__})."
            ) from None

    async def aclose(self) -> None:
        """Close the reply where it is read, on aiohttp's response: httpx's `aclose` comes to
        the same through its own bookkeeping (the elapsed time, two context managers), which
        nothing here reads. Unread to its end, the connection is closed: that stops the model
        server generating."""
        with map_aiohttp_exceptions():
            self._aiohttp.release()
            await self._aiohttp.wait_for_close()
        # httpx's response and the stream it reads refer to each other (httpx binds them in
        # `send`): a reference cycle holding aiohttp's response, its headers and the request,
        # some 30 objects a request left to the garbage collector. Nothing reads the body after
        # this, so the link goes, and all of it is freed here.
        self.response.stream = _CLOSED_BODY


async def open_stream(config: ReplicaConfig, body: bytes) -> UpstreamStream:
    """POST the chat request and return the open stream, or raise what went wrong."""
    client = client_for(config)
    request = client.chat_request(completions_url(config.base_url), body)
    try:
        response = await client.send(request, stream=True)
    except httpx.TransportError as exc:
        # The cause names the server's host and port: logged for operators, never answered.
        logger.warning(
            "model server %s (%s): %r", config.name, config.base_url, exc.__cause__ or exc
        )
        raise _send_failure(exc, config.name) from None
    if response.status_code >= 400:
        try:
            detail = await _read_error(response)
        finally:
            await response.aclose()
        raise error_for_upstream_status(response, detail)
    return UpstreamStream(response)


def error_for_upstream_status(response: httpx.Response, detail: str) -> UpstreamError:
    """A model server's error status as Mortar's error: its own rate limit (with its
    `Retry-After`), overloaded, a refusal of the request, or a failure."""
    status = response.status_code
    if status == 429:
        return UpstreamRateLimited(
            f"The model server is rate limiting: {detail}",
            retry_after=_retry_after(response.headers.get("Retry-After")),
        )
    if status == 529 or (status >= 500 and "overloaded" in detail.lower()):
        return UpstreamOverloaded(f"The model server is overloaded ({status}): {detail}")
    if status < 500:
        return UpstreamRejected(detail, status=status)
    return UpstreamError(f"The model server failed ({status}): {detail}")


def _retry_after(value: str | None) -> int | None:
    """`Retry-After` in whole seconds (at least 1), or None when absent or an HTTP date."""
    try:
        return max(math.ceil(float(value or "")), 1)
    except (ValueError, OverflowError):
        return None


def _send_failure(exc: httpx.TransportError, name: str) -> UpstreamError:
    """Name what went wrong before any response: unreachable, too slow, or broken — by the
    replica's name: the exceptions' own text holds its address.

    httpx-aiohttp files several aiohttp errors (a refused connection among them) under
    `ConnectTimeout`, so the aiohttp error behind it decides when there is one.
    """
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ServerTimeoutError | asyncio.TimeoutError):
        return UpstreamTimeout(f"The model server {name} did not answer in time.")
    if isinstance(cause, aiohttp.ClientConnectionError):
        return UpstreamUnavailable(f"The model server {name} could not be reached.")
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"The model server {name} did not answer in time.")
    if isinstance(exc, httpx.ConnectError | httpx.RemoteProtocolError):
        return UpstreamUnavailable(f"The model server {name} could not be reached.")
    return UpstreamError(f"The model server {name} failed ({exc.__class__.__name__}).")


async def _read_error(response: httpx.Response) -> str:
    raw = b""
    try:
        async for part in response.aiter_bytes():
            raw += part
            if len(raw) > ERROR_BODY_LIMIT:
                break
    except httpx.HTTPError:
        pass
    try:
        return _message(orjson.loads(raw))
    except orjson.JSONDecodeError:
        return raw[:500].decode("utf-8", "replace") or response.reason_phrase


def _message(data: Any) -> str:
    """The human message of an OpenAI- or vLLM-style error body."""
    if isinstance(data, dict):
        error = data.get("error", data)
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str):
            return message
        if isinstance(error, str):
            return error
    return str(data)[:500]


def _json(raw: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamError(
            f"The model server sent something that is not JSON: {raw[:100]!r}"
        ) from None
    if not isinstance(data, dict):
        raise UpstreamError("The model server sent a chunk that is not a JSON object.")
    return data


def _completion_as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    choices = completion.get("choices") or [{}]
    message = choices[0].get("message") or {}
    delta = {k: v for k, v in message.items() if k != "role" and v is not None}
    for call_index, call in enumerate(delta.get("tool_calls") or ()):
        call.setdefault("index", call_index)
    return {
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": choices[0].get("finish_reason"),
                "stop_reason": choices[0].get("stop_reason"),
            }
        ],
        "usage": completion.get("usage"),
    }
