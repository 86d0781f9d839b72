"""The suite must run on the real services: `.ci/run` fails when it did not run on Postgres."""

from django.conf import settings
from django.db import connection


def test_the_suite_runs_on_postgres() -> None:
    assert connection.vendor == "postgresql"


def test_the_suite_uses_redis_with_its_own_prefix() -> None:
    assert settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    assert settings.REDIS_PREFIX.startswith("mortar-test-")
