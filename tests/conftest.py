"""Fixtures shared by the whole suite.

The suite runs on the real Postgres and Redis (config/test_settings.py). End-to-end tests talk
to Mortar running as a real uvicorn process on a free loopback port, against the same test
database; what they need in it is committed, so the server process can see it. No test here
uses `transactional_db`: its table flush would wipe the shared committed rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.db import connection

from gateway.models import ApiKey, CatalogModel, Deployment, Organization
from gateway.services import key_create
from telemetry.models import Run
from tests.support.servers import ROOT, ServerProcess, start_mortar

pytest_plugins = ["tests.support.upstreams"]


MOCK_UPSTREAM_KEY = "test-upstream-key-from-the-environment"


@dataclass(frozen=True)
class Tenant:
    organization: Organization
    key: ApiKey
    secret: str


def _server_env() -> dict[str, str]:
    db = settings.DATABASES["default"]
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return {
        "DATABASE_URL": url,
        "REDIS_URL": settings.REDIS_URL,
        "MORTAR_REDIS_PREFIX": settings.REDIS_PREFIX,
        "MORTAR_VAR_DIR": str(settings.VAR_DIR),
        "SECRET_KEY": "test-only-secret-key-not-for-production",
        # Short enough to see keep-alive pings in a test; production keeps the spec's 10 s.
        "MORTAR_PING_SECONDS": "1",
        "MOCK_UPSTREAM_KEY": MOCK_UPSTREAM_KEY,
    }


@pytest.fixture(scope="session")
def mortar_server(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest, tmp_path_factory
) -> Iterator[ServerProcess]:
    """Mortar on uvicorn, on the test database, for the whole session."""
    if connection.vendor != "postgresql":
        pytest.fail("end-to-end tests need Postgres (DATABASE_URL)")
    if not str(settings.DATABASES["default"]["NAME"]).startswith("test_"):
        # pytest-django only creates the test database for runs with a django_db test.
        pytest.fail("modules that use mortar_server need `pytestmark = pytest.mark.django_db`")
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
def tenant(django_db_setup: None, django_db_blocker) -> Tenant:
    """An organization and key committed to the test database, visible to server processes."""
    with django_db_blocker.unblock():
        return _committed_tenant("acme-tests")


@pytest.fixture(scope="session")
def slow_model(django_db_setup: None, django_db_blocker) -> str:
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
def other_tenant(django_db_setup: None, django_db_blocker) -> Tenant:
    with django_db_blocker.unblock():
        return _committed_tenant("globex")


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


@pytest.fixture
def require_postgres() -> bool:
    return os.environ.get("MORTAR_REQUIRE_POSTGRES") == "1"
