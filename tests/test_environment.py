"""The suite runs on the backends it was configured for (config/test_settings.py,
`MORTAR_TEST_BACKENDS`): a misconfigured CI step fails here, loudly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from config.celery import app as celery_app
from core.backplane import backplane
from tests.conftest import server_database_problem
from tests.support.servers import ROOT

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


def _test_settings_in(env: dict[str, str]) -> dict[str, str]:
    """What config/test_settings.py settles on in a fresh process with `env` (and none of this
    run's own MORTAR_ values)."""
    script = (
        "import json, os, config.test_settings as s; print(json.dumps({"
        "'var_dir': str(s.VAR_DIR), 'prefix': s.REDIS_PREFIX,"
        " 'db': os.environ['MORTAR_TEST_DB_NAME']}))"
    )
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MORTAR_", "PYTEST_", "DJANGO_"))
        and key not in {"DATABASE_URL", "REDIS_URL"}
    }
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**inherited, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_each_parallel_worker_gets_its_own_var_dir_and_redis_prefix(tmp_path: Path) -> None:
    # `make test` runs the suite in pytest-xdist workers: each inherits the run's values from
    # the controller and must not share its servers' files or Redis keys with another worker.
    run = {"MORTAR_TEST_RUN": "tag42", "MORTAR_VAR_DIR": str(tmp_path)}
    gw0 = _test_settings_in({**run, "PYTEST_XDIST_WORKER": "gw0"})
    gw1 = _test_settings_in({**run, "PYTEST_XDIST_WORKER": "gw1"})
    assert gw0["var_dir"] == str(tmp_path / "gw0") and gw1["var_dir"] == str(tmp_path / "gw1")
    assert (gw0["prefix"], gw1["prefix"]) == ("mortar-test-tag42-gw0", "mortar-test-tag42-gw1")
    # A process the worker starts with its environment stays in the worker's place.
    child = _test_settings_in(
        {
            **run,
            "MORTAR_VAR_DIR": gw1["var_dir"],
            "MORTAR_REDIS_PREFIX": gw1["prefix"],
            "PYTEST_XDIST_WORKER": "gw1",
        }
    )
    assert (child["var_dir"], child["prefix"]) == (gw1["var_dir"], gw1["prefix"])
    # Serially, the run's own values.
    alone = _test_settings_in(run)
    assert (alone["var_dir"], alone["prefix"]) == (str(tmp_path), "mortar-test-tag42")


def test_an_embedded_worker_s_database_file_is_in_its_own_var_dir(tmp_path: Path) -> None:
    run = {"MORTAR_TEST_RUN": "tag42", "MORTAR_VAR_DIR": str(tmp_path)}
    embedded = {**run, "MORTAR_TEST_BACKENDS": "embedded", "PYTEST_XDIST_WORKER": "gw1"}
    assert _test_settings_in(embedded)["db"] == str(tmp_path / "gw1" / "test_mortar_tag42.sqlite3")
