"""Django's middleware for the pages Django serves (the dashboard, the admin, health and
metrics): a request id on every response. The API is served by `core.http.dispatch`, which
does the same itself.

The Messages route (`/v1/messages…`) speaks Anthropic's dialect on every answer, including the
ones no operation of it made (a wrong method, an unknown sub-path): Anthropic's error envelope,
and its `request-id` header beside `X-Request-Id` (issue 13).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from core.errors import Envelope, error_for_status
from core.http.requests import request_id_from
from core.http.responses import error_response

MESSAGES_PATH = "/v1/messages"


def is_messages_path(path: str) -> bool:
    """Whether `path` is on Anthropic's Messages route (`/v1/messages`, `…/count_tokens`)."""
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def envelope_for_path(path: str, default: Envelope = Envelope.OPENAI) -> Envelope:
    """The error envelope of the route at `path`: Anthropic's on the Messages route (Arkor,
    "Authentication": its failures "render in Anthropic's error envelope"), else `default`."""
    return Envelope.ANTHROPIC if is_messages_path(path) else default


def request_id_headers(path: str, request_id: str) -> list[tuple[bytes, bytes]]:
    """Echo the request id: `X-Request-Id` everywhere, and Anthropic's `request-id` beside it on
    the Messages route (the Anthropic SDK reads it as the response's `_request_id`)."""
    value = request_id.encode("latin-1")
    if is_messages_path(path):
        return [(b"x-request-id", value), (b"request-id", value)]
    return [(b"x-request-id", value)]


GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


class RequestIdMiddleware:
    """Give every request an id and echo it in `X-Request-Id`, errors included."""

    async_capable = True
    sync_capable = True

    def __init__(self, get_response: GetResponse):
        self.get_response = get_response
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self._async:
            return self._acall(request)
        response = self.get_response(request)
        assert isinstance(response, HttpResponseBase)
        response["X-Request-Id"] = request_id_from(request.headers)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        request_id = request_id_from(request.headers)
        response = self.get_response(request)
        assert not isinstance(response, HttpResponseBase)
        answered = await response
        answered["X-Request-Id"] = request_id
        return answered


def as_json_error(method: str, path: str, response: HttpResponseBase) -> HttpResponseBase:
    """The response, or the envelope in its place when it is an error that is not JSON."""
    if response.status_code < 400 or response.get("Content-Type", "").startswith(
        "application/json"
    ):
        return response
    error = error_for_status(response.status_code, f"{method} {path}: {response.reason_phrase}.")
    rendered = error_response(error, style=envelope_for_path(path))
    if response.has_header("Allow"):
        rendered["Allow"] = response["Allow"]
    return rendered
