"""The suite runs on the backends it was configured for (config/test_settings.py,
`MORTAR_TEST_BACKENDS`): a misconfigured CI step fails here, loudly."""

import os
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from config.celery import app as celery_app
from core.backplane import backplane
from tests.conftest import server_database_problem

BACKENDS = os.environ["MORTAR_TEST_BACKENDS"]
EXPECTED = {
    # `make test`: Postgres and Redis, a Celery worker's broker.
    "services": {
        "database": "postgresql",
        "backplane": "redis",
        "cache": "django.core.cache.backends.redis.RedisCache",
        "channel_layer": "channels_redis.core.RedisChannelLayer",
        "celery_eager": False,
    },
    # `make test-embedded`: what `make serve` runs on a bare machine.
    "embedded": {
        "database": "sqlite",
        "backplane": "memory",
        "cache": "django.core.cache.backends.locmem.LocMemCache",
        "channel_layer": "channels.layers.InMemoryChannelLayer",
        "celery_eager": True,
    },
}


async def test_the_run_is_on_the_backends_it_was_configured_for() -> None:
    assert {
        "database": connection.vendor,
        "backplane": backplane().name,
        "cache": settings.CACHES["default"]["BACKEND"],
        "channel_layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
        "celery_eager": celery_app.conf.task_always_eager,
    } == EXPECTED[BACKENDS]


@pytest.mark.django_db
def test_the_database_is_the_runs_own() -> None:
    name = Path(settings.DATABASES["default"]["NAME"])
    assert name.name.startswith("test_")
    if BACKENDS == "embedded":
        # A file the server processes open too, not SQLite's private in-memory database.
        assert name.parent == Path(settings.VAR_DIR) and name.is_file()


def test_server_processes_are_refused_a_database_not_named_test_and_told_why() -> None:
    assert server_database_problem({"NAME": "test_mortar_ab12", "TEST": {}}) == ""
    assert server_database_problem({"NAME": "/tmp/x/test_mortar.sqlite3"}) == ""
    # pytest-django made no test database: the module lacks the mark.
    assert "pytest.mark.django_db" in server_database_problem(
        {"NAME": "postgres", "TEST": {"NAME": "test_mortar_ab12"}}
    )
    # The chosen name lacks the prefix: said so, not blamed on the mark.
    for database in (
        {"NAME": "mortar_ci", "TEST": {"NAME": "mortar_ci"}},
        {"NAME": "postgres", "TEST": {"NAME": "mortar_ci"}},
    ):
        problem = server_database_problem(database)
        assert "'mortar_ci' (MORTAR_TEST_DB_NAME)" in problem
        assert "must start with `test_`" in problem
        assert "django_db" not in problem


@pytest.mark.postgres
def test_the_suite_runs_on_postgres() -> None:
    assert connection.vendor == "postgresql"


@pytest.mark.redis
def test_the_suite_uses_redis_with_its_own_prefix() -> None:
    assert settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    assert settings.REDIS_PREFIX.startswith("mortar-test-")
