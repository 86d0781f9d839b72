"""The ASGI application: Django's handler for HTTP, channels for websockets, and a lifespan that
warms up at start (or refuses to: config/workers.py) and flushes the run writer on shutdown.

One route skips Django's handler for speed: `POST /v1/chat/completions` goes through the lean
dispatch (`core.http.asgi`), which calls the same ninja operation Django's handler would
(`MORTAR_LEAN_DISPATCH=false` sends it through Django's handler too).
"""

import asyncio
import gc
import logging
import os
from typing import cast

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from billing.services.holds import release_budget_slices  # noqa: E402
from config.workers import refusal_of_this_start, stop_the_supervisor  # noqa: E402
from core.backplane import backplane  # noqa: E402
from core.errors import BackendUnavailable  # noqa: E402
from core.http.asgi import ASGIApp, LeanDispatch, Receive, Scope, Send  # noqa: E402
from core.http.cors import Cors  # noqa: E402
from core.lookups import lookup_cache  # noqa: E402
from core.termination import on_termination  # noqa: E402
from core.tracing import trace_requests, tracing_start, tracing_stop  # noqa: E402
from dashboard.websockets import websocket_urlpatterns  # noqa: E402
from gateway.api import CHAT_COMPLETIONS_PATH  # noqa: E402
from gateway.coordination.shutdown import stop_generations_after  # noqa: E402
from gateway.coordination.stop import live_generations  # noqa: E402
from gateway.tokens import default_counter  # noqa: E402
from gateway.upstream.client import close_clients  # noqa: E402
from telemetry.feed import telemetry_feed  # noqa: E402
from telemetry.leases import start_worker_heartbeat, stop_worker_heartbeat  # noqa: E402
from telemetry.metrics import metrics  # noqa: E402
from telemetry.store.running import close_run_writer, start_run_writer  # noqa: E402

logger = logging.getLogger(__name__)
chat_completions = LeanDispatch(CHAT_COMPLETIONS_PATH)


async def api_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["path"] == chat_completions.path and settings.MORTAR_LEAN_DISPATCH:
        return await chat_completions(scope, receive, send)
    return await django_asgi_app(scope, receive, send)


# Browser clients: CORS on the API routes only, never on the dashboard or the admin.
api_with_cors = Cors(api_app, settings.MORTAR_CORS_ORIGINS)


async def routes_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["path"].startswith("/v1/"):
        return await api_with_cors(scope, receive, send)
    return await django_asgi_app(scope, receive, send)


# Traces only when an OTLP endpoint is configured; otherwise the wrapper is not there at all.
http_app: ASGIApp = trace_requests(routes_app) if tracing_start() else routes_app


# channels' stubs type ASGI callables with asgiref's TypedDicts, Django's with mappings: the
# same callables, so the router is seen as the app it is.
router = cast(
    ASGIApp,
    ProtocolTypeRouter(
        {
            "http": http_app,
            "websocket": AllowedHostsOriginValidator(
                AuthMiddlewareStack(URLRouter(list(websocket_urlpatterns)))
            ),
        }
    ),
)


def tune_garbage_collector() -> None:
    """Move what start-up allocated (Django, the tokenizer, …) out of the collector's sight, and
    collect the young generation less often; see MORTAR_GC_YOUNG_THRESHOLD in settings."""
    gc.collect()
    gc.freeze()
    if settings.MORTAR_GC_YOUNG_THRESHOLD > 0:
        _, middle, old = gc.get_threshold()
        gc.set_threshold(settings.MORTAR_GC_YOUNG_THRESHOLD, middle, old)


async def start_backplane() -> None:
    """Listen for stops and dropped lookups from the start; a Redis out of reach is served
    without (keys read from the database, 503 where Redis is required) while the listener
    goes on trying in the background."""
    live_generations()  # their handlers are registered before the subscription is made
    lookup_cache()
    try:
        await backplane().start()
    except BackendUnavailable:
        logger.warning("Redis is out of reach at start: serving without it, reconnecting")


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "lifespan":
        return await router(scope, receive, send)
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            refusal = refusal_of_this_start()
            if refusal:
                logger.error(refusal)
                stop_the_supervisor()
                await send({"type": "lifespan.startup.failed", "message": refusal})
                return
            # Load the tokenizer now, not on the first request (~0.3 s).
            await asyncio.to_thread(default_counter)
            await start_backplane()
            on_termination(telemetry_feed().end_streams)  # they never end by themselves
            on_termination(lambda: stop_generations_after(settings.MORTAR_SHUTDOWN_GRACE_SECONDS))
            start_run_writer()  # drains spool files a stopped worker left behind
            # The lease this worker's runs name; renewed in the background from now on.
            await start_worker_heartbeat()
            metrics()  # this worker joins the server's metrics directory (telemetry.metrics_dir)
            tune_garbage_collector()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await telemetry_feed().close()
            await close_run_writer()  # flush what is queued before the process ends
            await release_budget_slices()
            await stop_worker_heartbeat()  # after the flush: its runs are closed by now
            await close_clients()
            await backplane().close()  # a stop request no longer waits for this worker
            await asyncio.to_thread(tracing_stop)  # the last spans exported
            await send({"type": "lifespan.shutdown.complete"})
            return
