"""Django's middleware for the pages Django serves (the dashboard, the admin, health and
metrics): a request id on every response, errors included. The API's dispatch
(`core.http.dispatch`) does the same for the API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from core.http.requests import request_id_from

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
        response = self.get_response(request)
        assert not isinstance(response, HttpResponseBase)
        answered = await response
        answered["X-Request-Id"] = request_id_from(request.headers)
        return answered
