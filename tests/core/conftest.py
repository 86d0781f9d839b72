"""Backplanes of each kind for the core tests, as worker processes would each have one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import redis
from django.conf import settings

from core.backplane import Backplane
from core.backplane.memory import MemoryBackplane
from core.backplane.redis import RedisBackplane

REDIS_URL = settings.REDIS_URL or "redis://127.0.0.1:6379/0"

KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
]


@pytest.fixture(params=KINDS)
async def make_plane(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[], Backplane]]:
    """Makes backplanes of one kind under the test module's `PREFIX` (a Redis key prefix no
    server process of the suite hears); closes them and deletes their keys afterwards."""
    prefix: str = request.module.PREFIX
    made: list[Backplane] = []

    def make() -> Backplane:
        plane: Backplane = (
            MemoryBackplane() if request.param == "memory" else RedisBackplane(REDIS_URL, prefix)
        )
        made.append(plane)
        return plane

    yield make
    for plane in made:
        await plane.close()
    if request.param == "redis":
        client = redis.Redis.from_url(REDIS_URL)
        stale = list(client.scan_iter(match=f"{prefix}:*"))
        if stale:
            client.delete(*stale)
        client.close()
