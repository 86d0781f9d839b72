"""The API's middleware: a request id on every response, and JSON for every error under /v1/.

Both run on Django's handler (settings.MIDDLEWARE) and their work is done by the same functions
in the lean dispatch (`core.http.asgi`), so an answer is the same on either path.

The Messages route (`/v1/messages…`) speaks Anthropic's dialect on every answer, including the
ones no operation of it made (a wrong method, an unknown sub-path): Anthropic's error envelope,
and its `request-id` header beside `X-Request-Id` (issue 13).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from core.errors import Envelope, error_for_status
from core.http.requests import REQUEST_ID_ATTRIBUTE, request_id_from
from core.http.responses import error_response

API_PREFIX = "/v1/"
MESSAGES_PATH = "/v1/messages"


def is_messages_path(path: str) -> bool:
    """Whether `path` is on Anthropic's Messages route (`/v1/messages`, `…/count_tokens`)."""
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def envelope_for_path(path: str, default: Envelope = Envelope.OPENAI) -> Envelope:
    """The error envelope of the route at `path`: Anthropic's on the Messages route (Arkor,
    "Authentication": its failures "render in Anthropic's error envelope"), else `default`."""
    return Envelope.ANTHROPIC if is_messages_path(path) else default


def tag_request_id(path: str, response: HttpResponseBase, request_id: str) -> None:
    """Echo the request id: `X-Request-Id` everywhere, and Anthropic's `request-id` beside it on
    the Messages route (the Anthropic SDK reads it as the response's `_request_id`)."""
    response["X-Request-Id"] = request_id
    if is_messages_path(path):
        response["request-id"] = request_id


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
        request_id = request_id_from(request.headers)
        setattr(request, REQUEST_ID_ATTRIBUTE, request_id)  # read by `request_id_of`
        response = self.get_response(request)
        assert isinstance(response, HttpResponseBase)
        tag_request_id(request.path, response, request_id)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        request_id = request_id_from(request.headers)
        setattr(request, REQUEST_ID_ATTRIBUTE, request_id)  # read by `request_id_of`
        response = self.get_response(request)
        assert not isinstance(response, HttpResponseBase)
        answered = await response
        tag_request_id(request.path, answered, request_id)
        return answered


class JsonErrorMiddleware:
    """Under /v1/, turn any error response that is not JSON (a 405 from the router, say) into
    the route's envelope: "Never a 422, never an HTML page" (PRODUCT.md decision 3)."""

    async_capable = True
    sync_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]]):
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = await self.get_response(request)
        return as_json_error(request.method or "", request.path, response)


def as_json_error(method: str, path: str, response: HttpResponseBase) -> HttpResponseBase:
    """The response, or the envelope in its place when it is an error that is not JSON."""
    if (
        response.status_code < 400
        or not path.startswith(API_PREFIX)
        or response.get("Content-Type", "").startswith("application/json")
    ):
        return response
    error = error_for_status(response.status_code, f"{method} {path}: {response.reason_phrase}.")
    rendered = error_response(error, style=envelope_for_path(path))
    if response.has_header("Allow"):
        rendered["Allow"] = response["Allow"]
    return rendered
