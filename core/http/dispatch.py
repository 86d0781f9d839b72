"""The API's one way in: every request under its prefix, from ASGI straight into its view.

Django's ASGI handler is built for pages: it gives each request a `ThreadSensitiveContext` (a
thread of its own), sends the `request_started` and `request_finished` signals, builds an
`HttpRequest` with its META and a spooled body file, runs the whole middleware chain —
sessions, CSRF, auth, messages, clickjacking, sign-in throttling — each reached through
`sync_to_async` (about a dozen thread hops a request), and walks the root URL resolver. An API
request needs none of it. Here the body is read into memory (up to the body limit, then only
counted), an `ApiRequest` is built, the path is resolved against the API's own URL patterns (a
dict lookup for a path without parameters), and the view — a ninja operation, with its auth
and exception handlers — is called with it. What an API needs from middleware is done here: the
request id on every answer, and any error answered in the route's envelope (an unknown path, a
wrong method, an exception no handler took, an error page that is not JSON). CORS and tracing
are ASGI wrappers around this app.

Nothing here touches the database. Without Django's handler no signal closes connections, so the
views reach the database through `core.db`, which drops a connection a restart has cut.

A client that disconnects cancels the request's task — and with it a generation, which records
its run as cancelled — as Django's handler does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import Http404, HttpResponseBase
from django.urls import URLPattern

from core.errors import MortarError, RouteNotFound
from core.http.asgi import Receive, Scope, Send, read_body, send_response
from core.http.middleware import as_json_error, envelope_for_path, request_id_headers
from core.http.requests import ApiRequest, RequestHeaders, request_id_from
from core.http.responses import EventStreamResponse, error_response

logger = logging.getLogger(__name__)

View = Callable[..., Awaitable[HttpResponseBase]]


@dataclass(frozen=True)
class Target:
    """What a path resolved to: the view and the keyword arguments it is called with."""

    view: View
    kwargs: dict[str, Any] = field(default_factory=dict)


def _as_async(view: Callable[..., Any]) -> View:
    # ninja's operations are coroutines; the document and docs pages are plain views, run on a
    # worker thread (they read no database).
    if iscoroutinefunction(view):
        return view
    return sync_to_async(view, thread_sensitive=False)


class ApiDispatch:
    """Serve every path under `prefix` with the views of `patterns` (relative to it)."""

    def __init__(self, *, prefix: str, patterns: Sequence[URLPattern], body_limit: int) -> None:
        self.prefix = prefix
        self.body_limit = body_limit
        self._patterns = [(pattern, _as_async(pattern.callback)) for pattern in patterns]
        # A path without parameters is one dict lookup, not a walk of the patterns — unless an
        # earlier pattern would take it first, as Django's resolver would have it.
        self._exact: dict[str, Target] = {}
        for index, (pattern, view) in enumerate(self._patterns):
            route = str(pattern.pattern)
            if pattern.pattern.converters or any(
                earlier.resolve(route) for earlier, _ in self._patterns[:index]
            ):
                continue
            self._exact.setdefault(prefix + route, Target(view, dict(pattern.default_args)))

    def resolve(self, path: str) -> Target | None:
        """The view for `path` and its path parameters, as Django's resolver gives them."""
        found = self._exact.get(path)
        if found is not None or not path.startswith(self.prefix):
            return found
        relative = path[len(self.prefix) :]
        for pattern, view in self._patterns:
            match = pattern.resolve(relative)
            if match is not None:
                return Target(view, match.kwargs)
        return None

    async def respond(self, request: ApiRequest, target: Target | None) -> HttpResponseBase:
        try:
            if target is None:
                raise Http404
            response = await target.view(request, **target.kwargs)
        except Http404:
            response = error_response(
                RouteNotFound(f"There is no route {request.method} {request.path}."),
                style=envelope_for_path(request.path),
            )
        except Exception:
            logger.exception("%s %s failed", request.method, request.path)
            response = error_response(
                MortarError("The server failed to answer this request."),
                style=envelope_for_path(request.path),
            )
        return as_json_error(request.method, request.path, response)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = RequestHeaders(scope["headers"])
        request_id = request_id_from(headers)
        received = await read_body(receive, self.body_limit)
        if received is None:
            return  # the client left mid-body: nothing was accepted
        body, size = received
        path = scope["path"]
        request = ApiRequest(
            method=scope["method"],
            path=path,
            body=body,
            body_size=size,
            headers=headers,
            request_id=request_id,
            query_string=scope.get("query_string", b""),
        )
        target = self.resolve(path)

        task = asyncio.current_task()
        assert task is not None
        answered = False
        client_left = False

        async def cancel_when_the_client_leaves() -> None:
            nonlocal client_left
            # After the body, the next message is http.disconnect: the client left, or
            # (uvicorn) the response is complete.
            while (await receive())["type"] != "http.disconnect":
                pass
            if not answered:
                client_left = True
                task.cancel()

        listener = asyncio.get_running_loop().create_task(cancel_when_the_client_leaves())
        response: HttpResponseBase | None = None
        try:
            response = await self.respond(request, target)
            await send_response(response, send, request_id_headers(path, request_id))
        except asyncio.CancelledError:
            if not client_left:
                raise  # the server is shutting down
            task.uncancel()
        finally:
            answered = True
            listener.cancel()
            if isinstance(response, EventStreamResponse):
                # A stream the client left before it was read still has a run to close.
                response.finished()
