"""Mortar's ASGI app with counters and opt-in experiments, for `bench/whatif.py` only.

Not for production: it measures what a change to the hot path would buy before the change is
made. The counters (thread hops through `sync_to_async`, threads started, requests) are read
at `GET /_bench/counts`. Experiments, each off unless its variable is set:

    BENCH_SHARED_EXECUTOR=1   one long-lived single-thread executor for every request's
                              thread-sensitive work, instead of a new thread per request
                              (asgiref's `ThreadSensitiveContext(executor=...)`)
    BENCH_AIOHTTP_TRANSPORT=1 httpx clients get `httpx_aiohttp.AiohttpTransport` (the
                              aiohttp pool) instead of httpcore's
    BENCH_GC_TUNE=1           after start-up, `gc.freeze()` and `gc.set_threshold(50_000, 20,
                              10)`: the collector stops re-scanning import-time objects and
                              runs a young collection every 50,000 allocations, not 700
"""

from __future__ import annotations

import collections
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref import sync

COUNTS: collections.Counter[str] = collections.Counter()

_hop = sync.SyncToAsync.__call__


async def _counted_hop(self: Any, *args: Any, **kwargs: Any) -> Any:
    func = getattr(self, "func", None)
    name = getattr(func, "__qualname__", None) or type(func).__name__
    COUNTS[f"hop {getattr(func, '__module__', '?')}.{name}"] += 1
    COUNTS["hops"] += 1
    return await _hop(self, *args, **kwargs)


sync.SyncToAsync.__call__ = _counted_hop  # type: ignore[method-assign]

_start = threading.Thread.start


def _counted_start(self: threading.Thread) -> None:
    COUNTS["threads started"] += 1
    _start(self)


threading.Thread.start = _counted_start  # type: ignore[method-assign]

if os.environ.get("BENCH_SHARED_EXECUTOR"):
    import django.core.handlers.asgi as django_asgi

    _shared = ThreadPoolExecutor(max_workers=1, thread_name_prefix="thread-sensitive")

    def _shared_context() -> sync.ThreadSensitiveContext:
        return sync.ThreadSensitiveContext(executor=_shared)

    django_asgi.ThreadSensitiveContext = _shared_context  # type: ignore[assignment,misc]

if os.environ.get("BENCH_AIOHTTP_TRANSPORT"):
    import httpx
    from httpx_aiohttp import AiohttpTransport

    _client_init = httpx.AsyncClient.__init__

    def _with_aiohttp(self: httpx.AsyncClient, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault(
            "transport",
            AiohttpTransport(
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=256)
            ),
        )
        _client_init(self, *args, **kwargs)

    httpx.AsyncClient.__init__ = _with_aiohttp  # type: ignore[method-assign]

from config.asgi import application as mortar  # noqa: E402

if os.environ.get("BENCH_GC_TUNE"):
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"] == "/_bench/counts":
        body = json.dumps(dict(COUNTS)).encode()
        if scope["method"] == "DELETE":
            COUNTS.clear()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return
    if scope["type"] == "http" and scope["path"].startswith("/v1/"):
        COUNTS["requests"] += 1
    await mortar(scope, receive, send)
