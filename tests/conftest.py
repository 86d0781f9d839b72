"""Fixtures shared by the whole suite.

The suite runs on the backends config/test_settings.py was asked for: the real Postgres and
Redis (`make test`), or the embedded default — a SQLite file, the memory backplane
(`make test-embedded`). End-to-end tests talk to Mortar running as a real uvicorn process on a
free loopback port, against the same test database; what they need in it is committed, so the
server process can see it. No test here uses `transactional_db`: its table flush would wipe the
shared committed rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from accounts.models import ApiKey, Organization
from accounts.services import key_create
from gateway.models import CatalogModel, Deployment
from telemetry.models import Run
from tests.support.servers import ROOT, ServerProcess, start_mortar

pytest_plugins = ["tests.support.upstreams", "tests.support.catalog"]


MOCK_UPSTREAM_KEY = "test-upstream-key-from-the-environment"


@dataclass(frozen=True)
class Tenant:
    organization: Organization
    key: ApiKey
    secret: str


def _database_url() -> str:
    """The test database's URL, for the processes the tests start."""
    db = settings.DATABASES["default"]
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"  # an absolute path: sqlite:////tmp/…
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def _server_env() -> dict[str, str]:
    return {
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "MORTAR_REDIS_PREFIX": settings.REDIS_PREFIX,
        "MORTAR_VAR_DIR": str(settings.VAR_DIR),
        "SECRET_KEY": "test-only-secret-key-not-for-production",
        # Short enough to see keep-alive pings in a test; production keeps the default 10 s.
        "MORTAR_PING_SECONDS": "1",
        "MOCK_UPSTREAM_KEY": MOCK_UPSTREAM_KEY,
    }


@pytest.fixture(scope="session")
def sees_other_connections() -> None:
    """Requested by the fixtures that commit rows for other connections (server processes,
    the run writer's thread): a test that uses them reads what those connections commit."""


@pytest.fixture
def _django_db_helper(
    request: pytest.FixtureRequest, django_db_setup: None, django_db_blocker
) -> Iterator[None]:
    """pytest-django's rolled-back test transaction — except, on SQLite, for tests that read
    what other connections commit.

    Postgres reads each statement at the latest commit (READ COMMITTED), so a test in its
    transaction still sees the rows a server process writes meanwhile. A SQLite transaction
    reads one snapshot, from its first read to its end: such a test would never see them. On
    SQLite these tests run without the transaction: what they write is committed by the
    servers, the writer thread or the committing fixtures anyway, or has ids of its own.
    """
    if connection.vendor == "sqlite" and "sees_other_connections" in request.fixturenames:
        with django_db_blocker.unblock():
            yield
        return
    request.getfixturevalue("_django_db_helper")  # pytest-django's own
    yield


def server_database_problem(database: dict[str, Any]) -> str:
    """Why server processes must not be started on `database`, or "" when they may: only a
    database named `test_…` is known to be the run's own."""
    if Path(database["NAME"]).name.startswith("test_"):
        return ""
    chosen = Path((database.get("TEST") or {}).get("NAME") or "").name
    if chosen and not chosen.startswith("test_"):
        return (
            f"the test database is named {chosen!r} (MORTAR_TEST_DB_NAME): the name must "
            "start with `test_`, the mark of a database the tests' servers may write to"
        )
    # pytest-django only creates the test database for runs with a django_db test.
    return "modules that use mortar_server need `pytestmark = pytest.mark.django_db`"


@pytest.fixture(scope="session")
def mortar_server(
    django_db_setup: None, django_db_blocker, sees_other_connections: None, tmp_path_factory
) -> Iterator[ServerProcess]:
    """Mortar on uvicorn, on the test database, for the whole session."""
    problem = server_database_problem(settings.DATABASES["default"])
    if problem:
        pytest.fail(problem)
    server = start_mortar(_server_env(), log_dir=tmp_path_factory.mktemp("servers"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def second_server(mortar_server: ServerProcess, tmp_path_factory) -> Iterator[ServerProcess]:
    """Another worker process on the same database and Redis."""
    server = start_mortar(_server_env(), log_dir=tmp_path_factory.mktemp("second"))
    yield server
    server.stop()


def _committed_tenant(name: str) -> Tenant:
    organization, _ = Organization.objects.get_or_create(name=name)
    issued = key_create(organization=organization, name="tests")
    return Tenant(organization=organization, key=issued.key, secret=issued.secret)


@pytest.fixture(scope="session")
def tenant(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> Tenant:
    """An organization and key committed to the test database, visible to server processes."""
    with django_db_blocker.unblock():
        return _committed_tenant("acme-tests")


@pytest.fixture(scope="session")
def slow_model(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> str:
    """A scripted model that pauses 200 ms between pieces, committed for server processes."""
    with django_db_blocker.unblock():
        deployment, _ = Deployment.objects.get_or_create(
            name="scripted-slow", defaults={"scripted_delay_ms": 200}
        )
        CatalogModel.objects.get_or_create(
            id="slow-scripted", defaults={"deployment": deployment, "context_window": 4096}
        )
    return "slow-scripted"


@pytest.fixture(scope="session")
def other_tenant(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> Tenant:
    with django_db_blocker.unblock():
        return _committed_tenant("globex")


def _priced(model_id: str, deployment: Deployment) -> str:
    CatalogModel.objects.update_or_create(
        id=model_id,
        defaults={
            "deployment": deployment,
            "context_window": 4096,
            "price_input": 1000,
            "price_output": 2000,
        },
    )
    return model_id


@pytest.fixture(scope="session")
def budget_model(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> str:
    with django_db_blocker.unblock():
        return _priced("budget-scripted", Deployment.objects.get(name="scripted"))


@pytest.fixture(scope="session")
def free_model(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> str:
    """A scripted model without prices: it costs nothing."""
    with django_db_blocker.unblock():
        CatalogModel.objects.update_or_create(
            id="budget-free-scripted",
            defaults={
                "deployment": Deployment.objects.get(name="scripted"),
                "context_window": 4096,
            },
        )
    return "budget-free-scripted"


@pytest.fixture(scope="session")
def slow_budget_model(
    django_db_setup: None, django_db_blocker, sees_other_connections: None
) -> str:
    """The same prices on a scripted model that pauses 200 ms between pieces."""
    with django_db_blocker.unblock():
        deployment, _ = Deployment.objects.get_or_create(
            name="scripted-budget-slow", defaults={"scripted_delay_ms": 200}
        )
        return _priced("budget-slow-scripted", deployment)


def manage(*args: str) -> str:
    """Run `manage.py` as its own process against the test database; return its stdout."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **_server_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        raise AssertionError(f"manage.py {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


@dataclass(frozen=True)
class CliTenant:
    name: str
    secret: str


@pytest.fixture
def new_tenant(mortar_server: ServerProcess) -> CliTenant:
    """A fresh organization and key made with the CLI, committed, for tests that change them."""
    name = f"org-{time.monotonic_ns()}"
    manage("createorg", name)
    return CliTenant(name=name, secret=manage("createkey", name).strip())


def wait_for_run(run_id: str, timeout: float = 10.0) -> Run:
    """Wait until the run writer has stored the run's outcome, and return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.filter(pk=run_id).exclude(status=Run.Status.IN_PROGRESS).first()
        if run is not None:
            return run
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} was not stored within {timeout}s")


def stored_bytes(run: Run) -> bytes:
    return b"".join(bytes(chunk.data) for chunk in run.chunks.order_by("seq"))
