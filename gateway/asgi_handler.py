"""A lean ASGI handler for the API (`/v1/`, `/healthz`, `/readyz`).

Django's stock ASGI handler costs an API request about a dozen thread hops: every
`MiddlewareMixin` middleware (sessions, auth, CSRF, messages, …) runs its hooks through
`sync_to_async`, and the `request_started` / `request_finished` signals run their synchronous
receivers the same way. The API needs none of them — it authenticates with API keys, keeps no
session and sets no cookie — so this handler runs only Mortar's own async middleware and sends
no request signals. Everything else (client-disconnect cancellation, body handling, streaming
responses) is Django's own code path. The dashboard and the admin keep the stock handler.

Without the request signals nobody calls `close_old_connections()` for the API, so the few
database reads it makes go through `database_read()`, which does that itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.db import close_old_connections
from django.urls import set_script_prefix
from django.utils.module_loading import import_string

API_MIDDLEWARE = (
    "gateway.middleware.RequestIdMiddleware",
    "gateway.middleware.JsonErrorMiddleware",
)
API_PATH_PREFIXES = ("/v1/", "/healthz", "/readyz")
T = TypeVar("T")


def is_api_path(path: str) -> bool:
    return path.startswith(API_PATH_PREFIXES)


async def database_read(read: Callable[[], T]) -> T:
    """Run a synchronous ORM read on a worker thread with a healthy connection."""

    def fresh() -> T:
        close_old_connections()
        return read()

    return await sync_to_async(fresh, thread_sensitive=False)()


class ApiHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        handler = convert_exception_to_response(self._get_response_async)
        for path in reversed(API_MIDDLEWARE):
            handler = convert_exception_to_response(import_string(path)(handler))
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        self._middleware_chain = handler

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.handle(scope, receive, send)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Django's `ASGIHandler.handle`, without the request signals."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            return

        responses: list[Any] = []

        async def process_request() -> Any:
            response = await self.run_get_response(request)
            responses.append(response)
            with contextlib.suppress(asyncio.CancelledError):  # the client went away mid-send
                await self.send_response(response, send)
            return response

        # A client that disconnects cancels the response task (and so the generation).
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(process_request()),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                with contextlib.suppress(RequestAborted):
                    task.result()
            else:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        # What Django's `response.close()` is for: a stream the client left before it was read
        # still has a run to close (gateway/streaming.py).
        finished = getattr(responses[0], "mortar_finished", None) if responses else None
        if finished is not None:
            await finished()
        body_file.close()
