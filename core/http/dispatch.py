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
wrong method, an exception no handler took, an error page that is not JSON), which its router
declares (`core.http.routes`): the dispatch puts it on the request, where the API's exception
handlers read it. CORS and tracing are ASGI wrappers around this app.

Nothing here touches the database. Without Django's handler no signal closes connections, so the
views reach the database through `core.db`, which drops a connection a restart has cut.

A client that disconnects cancels the request's task — and with it a generation, which records
its run as cancelled — as Django's handler does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import Http404, HttpResponseBase

from core.errors import MortarError, RouteNotFound, error_for_status
from core.http.asgi import Receive, Scope, Send, read_body, send_response
from core.http.envelopes import Envelope
from core.http.requests import ApiRequest, RequestHeaders, request_id_from
from core.http.responses import EventStreamResponse, error_response
from core.http.routes import ApiRoute

logger = logging.getLogger(__name__)

View = Callable[..., Awaitable[HttpResponseBase]]


@dataclass(frozen=True)
class Target:
    """What a path resolved to: the view (None for no route) and the keyword arguments it is
    called with, the envelope of its errors and the headers that carry the request id."""

    view: View | None
    envelope: Envelope
    id_headers: tuple[bytes, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, view: View | None, envelope: Envelope) -> Target:
        extra = envelope.request_id_header
        names = (b"x-request-id",) if extra is None else (b"x-request-id", extra.encode())
        return cls(view, envelope, names)


def _as_async(view: Callable[..., Any]) -> View:
    # ninja's operations are coroutines; the document and docs pages are plain views, run on a
    # worker thread (they read no database).
    if iscoroutinefunction(view):
        return view
    return sync_to_async(view, thread_sensitive=False)


def as_json_error(
    request: ApiRequest, response: HttpResponseBase, envelope: Envelope
) -> HttpResponseBase:
    """The response, or the envelope in its place when it is an error that is not JSON (ninja's
    405 for a wrong method, say): an API never answers with an HTML page."""
    if response.status_code < 400 or response.get("Content-Type", "").startswith(
        "application/json"
    ):
        return response
    reason = f"{request.method} {request.path}: {response.reason_phrase}."
    rendered = error_response(error_for_status(response.status_code, reason), envelope=envelope)
    if response.has_header("Allow"):
        rendered["Allow"] = response["Allow"]
    return rendered


class ApiDispatch:
    """Serve every path under `prefix` with the views of `routes` (relative to it); a path no
    route matches is answered in the envelope of the longest of `prefixes` it is under, else in
    `envelope`."""

    def __init__(
        self,
        *,
        prefix: str,
        routes: Sequence[ApiRoute],
        prefixes: Mapping[str, Envelope],
        envelope: Envelope,
        body_limit: int,
    ) -> None:
        self.prefix = prefix
        self.body_limit = body_limit
        self._routes = [
            (route.pattern, Target.of(_as_async(route.pattern.callback), route.envelope))
            for route in routes
        ]
        # A path without parameters is one dict lookup, not a walk of the patterns — unless an
        # earlier pattern would take it first, as Django's resolver would have it.
        self._exact: dict[str, Target] = {}
        for index, (pattern, target) in enumerate(self._routes):
            path = str(pattern.pattern)
            if pattern.pattern.converters or any(
                earlier.resolve(path) for earlier, _ in self._routes[:index]
            ):
                continue
            found = replace(target, kwargs=dict(pattern.default_args))
            self._exact.setdefault(prefix + path, found)
        self._unknown = [
            (prefix + under, Target.of(None, declared))
            for under, declared in sorted(prefixes.items(), key=lambda item: -len(item[0]))
        ]
        self._unknown_elsewhere = Target.of(None, envelope)

    def resolve(self, path: str) -> Target:
        """The view for `path` and its path parameters, as Django's resolver gives them; for a
        path no route matches, no view and the envelope it is answered in."""
        found = self._exact.get(path)
        if found is not None:
            return found
        relative = path[len(self.prefix) :] if path.startswith(self.prefix) else None
        if relative is not None:
            for pattern, target in self._routes:
                match = pattern.resolve(relative)
                if match is not None:
                    return replace(target, kwargs=match.kwargs)
        for under, unknown in self._unknown:
            if path == under or path.startswith(under + "/"):
                return unknown
        return self._unknown_elsewhere

    async def respond(self, request: ApiRequest, target: Target) -> HttpResponseBase:
        envelope = target.envelope
        try:
            if target.view is None:
                raise Http404
            response = await target.view(request, **target.kwargs)
        except Http404:
            response = error_response(
                RouteNotFound(f"There is no route {request.method} {request.path}."),
                envelope=envelope,
            )
        except Exception:
            logger.exception("%s %s failed", request.method, request.path)
            response = error_response(
                MortarError("The server failed to answer this request."), envelope=envelope
            )
        return as_json_error(request, response, envelope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = RequestHeaders(scope["headers"])
        request_id = request_id_from(headers)
        received = await read_body(receive, self.body_limit)
        if received is None:
            return  # the client left mid-body: nothing was accepted
        body, size = received
        path = scope["path"]
        target = self.resolve(path)
        request = ApiRequest(
            method=scope["method"],
            path=path,
            body=body,
            body_size=size,
            headers=headers,
            request_id=request_id,
            query_string=scope.get("query_string", b""),
            envelope=target.envelope,
        )

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
            value = request_id.encode("latin-1")
            await send_response(response, send, [(name, value) for name in target.id_headers])
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
