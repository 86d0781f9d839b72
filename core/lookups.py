"""Cached reads for the hot path: API keys and catalog models, without a database round trip.

Each worker keeps what it looked up. Any change to a key, an organization, a model or a
deployment — a revocation included — is announced to every worker (`core.backplane`), which
drops its cache at once, so a revoked key fails on its next request everywhere, not after
a cache's lifetime. Entries also expire after `MAX_AGE_SECONDS`, in case an announcement is lost.

Only what is looked up while the worker hears announcements is cached, and used: while Redis
is out of reach every lookup reads the database (a fresh key lookup: slower, never wrong), and
each (re)subscription drops the cache — whatever was announced while the worker was cut off
applies the moment it hears again. On a backplane that other processes cannot reach (the
embedded default's, in memory) nothing is cached: `manage.py revokekey` could not tell us.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TypeVar, cast

from django.db import transaction
from django.db.models import Model
from django.db.models.signals import post_delete, post_save

from core.backplane import backplane, publish_from_sync
from core.db import database_read
from core.errors import BackendUnavailable
from core.loops import PerLoop

logger = logging.getLogger(__name__)

MAX_AGE_SECONDS = 60.0
CHANNEL = "lookups"
T = TypeVar("T")


class LookupCache:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], tuple[float, object]] = {}
        # Counts the times the cache was dropped: a value read before a drop is not stored
        # after it (it may be what the announcement was about).
        self._generation = 0
        self._backplane = backplane()
        self._backplane.on(CHANNEL, lambda message: self.forget())
        self._backplane.on_subscribed(self.forget)

    def forget(self) -> None:
        """Drop every cached lookup."""
        self._entries.clear()
        self._generation += 1

    async def get(self, kind: str, key: str, load: Callable[[], T]) -> T:
        """The cached value, or `load()` (a synchronous ORM read, run off the event loop)."""
        plane = self._backplane
        if not plane.shared:
            return await database_read(load)
        if not plane.listening():
            plane.listen()  # in the background: this request does not wait for Redis
            return await database_read(load)
        now = time.monotonic()
        entry = self._entries.get((kind, key))
        if entry is not None and now - entry[0] < MAX_AGE_SECONDS:
            # Stored by a `load` of this kind, for this key: the type `load` returns.
            return cast(T, entry[1])
        generation = self._generation
        value = await database_read(load)
        if value is not None and generation == self._generation and plane.listening():
            self._entries[(kind, key)] = (now, value)
        return value


lookup_cache = PerLoop(LookupCache)


def announce_change(sender: type, **kwargs: object) -> None:
    """Signal receiver: once the change is committed, tell every worker to drop its cached keys
    and models."""
    # After the commit, never inside the transaction: an announcement that failed there would
    # roll the change back (a revocation refused because Redis is down), and one heard before
    # the commit would let a worker cache the row as it was. Outside a transaction it goes now.
    transaction.on_commit(
        functools.partial(_announce, sender.__name__), using=cast(str | None, kwargs.get("using"))
    )


def _announce(name: str) -> None:
    try:
        publish_from_sync(CHANNEL, name)
    except BackendUnavailable as error:
        # The change stands. A worker that cannot hear announcements reads keys and models
        # from the database, and drops its cache when it subscribes again; one that can hear
        # but missed this one keeps its entry for at most MAX_AGE_SECONDS.
        logger.warning(
            "lookups: a change of %s is committed but could not be announced to the other "
            "workers (%s); each applies it when it hears Redis again or within %.0f s",
            name,
            error.__cause__ or error,
            MAX_AGE_SECONDS,
        )


def forget_lookups_when_saved(*models: type[Model]) -> None:
    """Drop every worker's cached lookups whenever a row of these models changes (apps call
    this from `AppConfig.ready` for the models their lookups read)."""
    for model in models:
        post_save.connect(announce_change, sender=model, dispatch_uid=f"lookups-{model.__name__}")
        post_delete.connect(
            announce_change, sender=model, dispatch_uid=f"lookups-del-{model.__name__}"
        )
