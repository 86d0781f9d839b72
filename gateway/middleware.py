"""Give every request an id and echo it in `X-Request-Id` on every response, errors included."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase
from django.http.request import HttpHeaders

from gateway.api_request import AnyRequest, RequestHeaders
from gateway.ids import new_hex_id

_CLIENT_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")


def request_id_for(request: AnyRequest) -> str:
    """The client's `X-Request-Id` when it is a sane header value, else a new one."""
    return request_id_from(request.headers)


def request_id_from(headers: RequestHeaders | HttpHeaders) -> str:
    given = (headers.get("X-Request-Id") or "").strip()
    if _CLIENT_REQUEST_ID.fullmatch(given):
        return given
    return f"req_{new_hex_id()}"


class RequestIdMiddleware:
    async_capable = True
    sync_capable = True

    def __init__(
        self, get_response: Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]
    ):
        self.get_response = get_response
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):  # type: ignore[no-untyped-def]
        if self._async:
            return self._acall(request)
        request.request_id = request_id_for(request)  # type: ignore[attr-defined]
        response = self.get_response(request)
        response["X-Request-Id"] = request.request_id  # type: ignore[attr-defined,index]
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        request.request_id = request_id_for(request)  # type: ignore[attr-defined]
        response = await self.get_response(request)  # type: ignore[misc]
        response["X-Request-Id"] = request.request_id  # type: ignore[attr-defined]
        return response


class JsonErrorMiddleware:
    """Under /v1/, turn any non-JSON error response (e.g. a 405 from the router) into the
    OpenAI envelope: "Never a 422, never an HTML page" (PRODUCT.md decision 3)."""

    async_capable = True
    sync_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]]):
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = await self.get_response(request)
        if (
            response.status_code >= 400
            and request.path.startswith("/v1/")
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return _envelope_for(request, response)
        return response


def _envelope_for(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    from gateway.errors import MortarError
    from gateway.responses import error_response

    error = MortarError(f"{request.method} {request.path}: {response.reason_phrase}.")
    error.status = response.status_code
    error.type = "invalid_request_error" if response.status_code < 500 else "server_error"
    error.code = {405: "method_not_allowed", 404: "not_found"}.get(
        response.status_code, "http_error"
    )
    rendered = error_response(error)
    if response.has_header("Allow"):
        rendered["Allow"] = response["Allow"]
    return rendered
