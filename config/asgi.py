"""The ASGI application: the API's own dispatch for everything under /v1/, Django's handler for
the rest (the dashboard, the admin, health and metrics), channels for websockets, and a lifespan
that warms up at start (or refuses to: config/workers.py) and flushes the run writer on shutdown.

The API skips Django's handler and its middleware, which only the pages need: `core.http.dispatch`
says what that saves. CORS and tracing wrap the API alone.
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

from billing.services.holds import release_budget_slices, settlements_drained  # noqa: E402
from config.api import API_PREFIX, api_dispatch  # noqa: E402
from config.workers import refusal_of_this_start, stop_the_supervisor  # noqa: E402
from core.backplane import backplane  # noqa: E402
from core.errors import BackendUnavailable  # noqa: E402
from core.http.asgi import ASGIApp, Receive, Scope, Send  # noqa: E402
from core.http.cors import Cors  # noqa: E402
from core.lookups import lookup_cache  # noqa: E402
from core.termination import on_termination  # noqa: E402
from core.tracing import trace_requests, tracing_start, tracing_stop  # noqa: E402
from dashboard.websockets import websocket_urlpatterns  # noqa: E402
from gateway.contract import cors  # noqa: E402
from gateway.coordination.shutdown import stop_generations_after  # noqa: E402
from gateway.coordination.stop import live_generations  # noqa: E402
from gateway.tokens import default_counter  # noqa: E402
from gateway.upstream.client import close_clients  # noqa: E402
from gateway.upstream.counting import usage_counts_finished  # noqa: E402
from telemetry.feed import telemetry_feed  # noqa: E402
from telemetry.leases import start_worker_heartbeat, stop_worker_heartbeat  # noqa: E402
from telemetry.metrics import metrics  # noqa: E402
from telemetry.store.running import close_run_writer, start_run_writer  # noqa: E402

logger = logging.getLogger(__name__)

# Browser clients: CORS on the API only, never on the dashboard or the admin.
api_with_cors = Cors(
    api_dispatch(),
    settings.MORTAR_CORS_ORIGINS,
    allow_headers=cors.REQUEST_HEADERS,
    allow_header_prefixes=cors.REQUEST_HEADER_PREFIXES,
    expose_headers=cors.RESPONSE_HEADERS,
)
# Traces only when an OTLP endpoint is configured; otherwise the wrapper is not there at all.
api_app: ASGIApp = trace_requests(api_with_cors) if tracing_start() else api_with_cors


async def http_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["path"].startswith(API_PREFIX):
        return await api_app(scope, receive, send)
    return await django_asgi_app(scope, receive, send)


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
            await usage_counts_finished()  # their runs close, and are flushed below
            await close_run_writer()  # flush what is queued before the process ends
            await settlements_drained()  # the slices' draws settled in the background
            await release_budget_slices()
            await stop_worker_heartbeat()  # after the flush: its runs are closed by now
            await close_clients()
            await backplane().close()  # a stop request no longer waits for this worker
            await asyncio.to_thread(tracing_stop)  # the last spans exported
            await send({"type": "lifespan.shutdown.complete"})
            return
