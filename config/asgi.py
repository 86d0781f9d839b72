"""The ASGI application: the API on a lean handler, the dashboard and admin on Django's, channels
for websockets, and a lifespan that warms up at start and flushes the run writer on shutdown."""

import asyncio
import gc
import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from dashboard.routing import websocket_urlpatterns  # noqa: E402
from gateway.asgi_handler import ApiHandler, is_api_path  # noqa: E402
from gateway.broadcast import broadcast  # noqa: E402
from gateway.chat_endpoint import CHAT_COMPLETIONS_PATH, chat_completions  # noqa: E402
from gateway.live import live_generations  # noqa: E402
from gateway.lookups import lookup_cache  # noqa: E402
from gateway.tokens import default_counter  # noqa: E402
from gateway.upstream import close_clients  # noqa: E402
from telemetry.writer import close_run_writer, start_run_writer  # noqa: E402

api_app = ApiHandler()


async def http_app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["path"] == CHAT_COMPLETIONS_PATH:
        return await chat_completions(scope, receive, send)
    app = api_app if is_api_path(scope["path"]) else django_asgi_app
    return await app(scope, receive, send)


router = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)


def tune_garbage_collector() -> None:
    """Move what start-up allocated (Django, the tokenizer, …) out of the collector's sight, and
    collect the young generation less often; see MORTAR_GC_YOUNG_THRESHOLD in settings."""
    gc.collect()
    gc.freeze()
    if settings.MORTAR_GC_YOUNG_THRESHOLD > 0:
        _, middle, old = gc.get_threshold()
        gc.set_threshold(settings.MORTAR_GC_YOUNG_THRESHOLD, middle, old)


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "lifespan":
        return await router(scope, receive, send)
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            # Load the tokenizer now, not on the first request (~0.3 s).
            await asyncio.to_thread(default_counter)
            await live_generations().start()
            await lookup_cache().start()
            start_run_writer()  # drains spool files a stopped worker left behind
            tune_garbage_collector()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await close_run_writer()  # flush what is queued before the process ends
            await close_clients()
            await broadcast().close()  # a stop request no longer waits for this worker
            await send({"type": "lifespan.shutdown.complete"})
            return
