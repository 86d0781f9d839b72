"""/readyz tells anyone whether each part is ok, and only staff why not (an anonymous
caller must not get the database's error text, with its host and port).

A Mortar process of this module's own reaches Postgres through a proxy the test cuts: the
database check fails, and so does the run writer's next write, whose error names the address.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import orjson
import pytest
from django.conf import settings

from mortar import __version__
from tests.conftest import Tenant, _server_env, wait_for_run
from tests.support.servers import ServerProcess, start_mortar
from tests.support.waiting import wait_until
from tests.telemetry.store.test_writer_outage import PostgresProxy

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

STAFF = "readyz-staff"
PASSWORD = "a readyz test password"
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@dataclass(frozen=True)
class Proxied:
    server: ServerProcess
    proxy: PostgresProxy


@pytest.fixture(scope="module")
def proxied(
    django_db_setup: None, django_db_blocker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxied]:
    from django.contrib.auth.models import User

    with django_db_blocker.unblock():
        user, _ = User.objects.get_or_create(username=STAFF, defaults={"is_staff": True})
        user.set_password(PASSWORD)
        user.save()
    db = settings.DATABASES["default"]
    proxy = PostgresProxy((db["HOST"], int(db["PORT"])))
    env = {
        **_server_env(),
        "DATABASE_URL": f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}",
        "MORTAR_VAR_DIR": str(tmp_path_factory.mktemp("readyz-var")),
    }
    server = start_mortar(env, log_dir=tmp_path_factory.mktemp("readyz-logs"))
    yield Proxied(server=server, proxy=proxy)
    server.stop()
    proxy.close()


def signed_in(server: ServerProcess) -> httpx.Client:
    client = httpx.Client(base_url=server.base_url, timeout=30)
    form = client.get("/dashboard/login/")
    token = CSRF_FIELD.search(form.text)
    assert token is not None, form.text
    answer = client.post(
        "/dashboard/login/",
        data={"csrfmiddlewaretoken": token.group(1), "username": STAFF, "password": PASSWORD},
    )
    assert answer.status_code == 302, answer.text
    return client


def complete(server: ServerProcess, tenant: Tenant) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": False}),
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )


def writer_failed(server: ServerProcess) -> httpx.Response | None:
    """/readyz, anonymously, once it reports a failed write of the run writer."""
    response = httpx.get(f"{server.base_url}/readyz", timeout=30)
    return response if response.json()["run_writer"]["last_error"] else None


def test_readyz_names_no_address_unless_staff_ask(proxied: Proxied, tenant: Tenant) -> None:
    port = str(proxied.proxy.port)
    staff = signed_in(proxied.server)
    wait_for_run(complete(proxied.server, tenant).headers["X-Mortar-Run-Id"])  # key cached

    proxied.proxy.cut()
    try:
        assert complete(proxied.server, tenant).status_code == 200  # its run waits to be written
        anonymous = wait_until(
            lambda: writer_failed(proxied.server), timeout=30, message="the writer never failed"
        )
        assert anonymous.status_code == 503
        body = anonymous.json()
        assert body["ok"] is False
        assert body["version"] == __version__  # the release, even while a part is down
        assert body["database"] == "unavailable"
        assert body["run_writer"]["last_error"]["message"] == "OperationalError"
        assert port not in anonymous.text and "127.0.0.1" not in anonymous.text
    finally:
        proxied.proxy.restore()

    # The database is back; the writer's last error is still reported — in full to staff only.
    wait_until(
        lambda: httpx.get(f"{proxied.server.base_url}/readyz", timeout=30).status_code == 200,
        timeout=30,
        message="the database did not come back",
    )
    anonymous_after = httpx.get(f"{proxied.server.base_url}/readyz", timeout=30)
    assert port not in anonymous_after.text
    detailed = staff.get("/readyz")
    assert detailed.json()["database"] == "ok"
    assert port in detailed.json()["run_writer"]["last_error"]["message"]
    staff.close()
