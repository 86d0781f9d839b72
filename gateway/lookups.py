"""Cached reads for the hot path: API keys and catalog models, without a database round trip.

Each worker keeps what it looked up. Any change to a key, an organization, a model or a
deployment — a revocation included — is announced to every worker (`broadcast.py`), which
drops its cache at once, so a revoked key fails on its next request everywhere (PRODUCT.md
decision 8). Entries also expire after `MAX_AGE_SECONDS`, in case an announcement is lost.
Without Redis nothing is cached: other processes (`manage.py revokekey`) could not tell us.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.db.models.signals import post_delete, post_save

from gateway.asgi_handler import database_read
from gateway.broadcast import broadcast, publish_from_sync

MAX_AGE_SECONDS = 60.0
CHANNEL = "lookups"
T = TypeVar("T")


class LookupCache:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], tuple[float, object]] = {}
        self._broadcast = broadcast()
        self._broadcast.on(CHANNEL, lambda message: self._entries.clear())

    async def start(self) -> None:
        await self._broadcast.start()

    async def get(self, kind: str, key: str, load: Callable[[], T]) -> T:
        """The cached value, or `load()` (a synchronous ORM read, run off the event loop)."""
        if not settings.REDIS_URL:
            return await database_read(load)
        now = time.monotonic()
        entry = self._entries.get((kind, key))
        if entry is not None and now - entry[0] < MAX_AGE_SECONDS:
            return entry[1]  # type: ignore[return-value]
        await self.start()  # subscribed before caching anything
        value = await database_read(load)
        if value is not None:
            self._entries[(kind, key)] = (now, value)
        return value


_caches: dict[asyncio.AbstractEventLoop, LookupCache] = {}


def lookup_cache() -> LookupCache:
    loop = asyncio.get_running_loop()
    cache = _caches.get(loop)
    if cache is None:
        cache = _caches[loop] = LookupCache()
    return cache


def announce_change(sender: type, **kwargs: object) -> None:
    """Signal receiver: tell every worker to drop its cached keys and models."""
    publish_from_sync(CHANNEL, sender.__name__)


def connect_signals() -> None:
    from gateway.models import ApiKey, CatalogModel, Deployment, Organization

    for model in (ApiKey, Organization, CatalogModel, Deployment):
        post_save.connect(announce_change, sender=model, dispatch_uid=f"lookups-{model.__name__}")
        post_delete.connect(
            announce_change, sender=model, dispatch_uid=f"lookups-del-{model.__name__}"
        )
