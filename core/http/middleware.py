"""The API's middleware: a request id on every response, and JSON for every error under /v1/.

Both run on Django's handler (settings.MIDDLEWARE) and their work is done by the same functions
in the lean dispatch (`core.http.asgi`), so an answer is the same on either path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from core.errors import error_for_status
from core.http.requests import REQUEST_ID_ATTRIBUTE, request_id_from
from core.http.responses import error_response

API_PREFIX = "/v1/"

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
        response["X-Request-Id"] = request_id
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        request_id = request_id_from(request.headers)
        setattr(request, REQUEST_ID_ATTRIBUTE, request_id)  # read by `request_id_of`
        response = self.get_response(request)
        assert not isinstance(response, HttpResponseBase)
        answered = await response
        answered["X-Request-Id"] = request_id
        return answered


class JsonErrorMiddleware:
    """Under /v1/, turn any error response that is not JSON (a 405 from the router, say) into
    the OpenAI envelope: "Never a 422, never an HTML page" (PRODUCT.md decision 3)."""

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
    rendered = error_response(error)
    if response.has_header("Allow"):
        rendered["Allow"] = response["Allow"]
    return rendered
