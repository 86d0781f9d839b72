"""A change to a key, an organization, a model or a deployment is made while Redis is out of
reach: it is committed (the command exits 0, the page answers as usual), and every worker
applies it on its next request. The announcement to the workers is sent after the commit and
only logged when it fails; a worker cut off from Redis reads what it looks up from the database.

Two Mortar processes (two workers) and the process making the change all reach Redis through
one TCP proxy (`tests/support/tcp_proxy.py`), which the test cuts: Redis is down for all of
them, as in an outage.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from django.conf import settings

from accounts.models import ApiKey, Organization
from gateway.models import CatalogModel, Deployment
from tests.conftest import CliTenant, _server_env
from tests.dashboard.conftest import DASHBOARD_PASSWORD
from tests.support.servers import ROOT, ServerProcess, start_mortar
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
NOT_ANNOUNCED = "could not be announced to the other workers"


@pytest.fixture
def redis_proxy() -> Iterator[TcpProxy]:
    """A proxy to the suite's Redis, open to begin with."""
    target = urlsplit(settings.REDIS_URL)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 6379)
    yield proxy
    proxy.close()


def behind(proxy: TcpProxy) -> dict[str, str]:
    """The environment of a Mortar process that reaches Redis through the proxy."""
    return {**_server_env(), "REDIS_URL": proxy.url(path=urlsplit(settings.REDIS_URL).path)}


@pytest.fixture
def workers(redis_proxy: TcpProxy, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    try:
        for n in range(2):
            log_dir = tmp_path / f"worker-{n}"
            log_dir.mkdir()
            started.append(start_mortar(behind(redis_proxy), log_dir=log_dir))
        yield started
    finally:
        for server in started:
            server.stop()


def cut_off(proxy: TcpProxy, workers: list[ServerProcess]) -> None:
    """Cut Redis off, and wait until every worker has noticed."""
    proxy.cut()
    for server in workers:
        wait_until(
            lambda server=server: "lost the broadcast" in server.log(),  # type: ignore[misc]
            timeout=8,
            message="a worker did not notice the cut",
        )


def manage_behind(proxy: TcpProxy, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `manage.py` as its own process, reaching Redis through the proxy."""
    (ROOT / "var").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **behind(proxy)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def shell_behind(proxy: TcpProxy, code: str) -> subprocess.CompletedProcess[str]:
    """An operator's change made in `manage.py shell`: saved through the ORM and its signals."""
    return manage_behind(proxy, "shell", "--no-imports", "-c", code)


def get_models(server: ServerProcess, secret: str) -> httpx.Response:
    return httpx.get(
        f"{server.base_url}/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )


def complete(server: ServerProcess, secret: str, model: str, **fields: object) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], **fields}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def assert_refused_key(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "invalid_key"


def test_a_key_revoked_with_the_command_while_redis_is_down_is_refused_by_every_worker(
    redis_proxy: TcpProxy, workers: list[ServerProcess], new_tenant: CliTenant
) -> None:
    for server in workers:
        assert get_models(server, new_tenant.secret).status_code == 200  # cached by each
    cut_off(redis_proxy, workers)

    revoked = manage_behind(redis_proxy, "revokekey", new_tenant.secret[:11])

    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.startswith("Revoked key " + new_tenant.secret[:11])
    assert NOT_ANNOUNCED in revoked.stderr  # said, not failed
    key = ApiKey.objects.get(prefix=new_tenant.secret[:11])
    assert key.revoked_at is not None
    for server in workers:
        assert_refused_key(get_models(server, new_tenant.secret))

    # Redis comes back: the workers subscribe again, and the key stays refused.
    redis_proxy.restore()
    for server in workers:
        wait_until(
            lambda server=server: server.log().count("broadcast's Redis connection is back"),  # type: ignore[misc]
            timeout=15,
            message="a worker did not reconnect",
        )
        for _ in range(3):
            assert_refused_key(get_models(server, new_tenant.secret))


def sign_in(client: httpx.Client, username: str) -> None:
    form = client.get("/dashboard/login/")
    token = CSRF_FIELD.search(form.text)
    assert token is not None, form.text
    signed_in = client.post(
        "/dashboard/login/",
        data={
            "csrfmiddlewaretoken": token.group(1),
            "username": username,
            "password": DASHBOARD_PASSWORD,
        },
    )
    assert signed_in.status_code == 302, signed_in.text


@pytest.fixture(scope="module")
def staff_user(django_db_setup: None, django_db_blocker) -> str:
    """A staff account of this test's own, committed for the server processes."""
    from django.contrib.auth.models import User

    name = f"outage-staff-{time.monotonic_ns()}"
    with django_db_blocker.unblock():
        User.objects.create_user(name, password=DASHBOARD_PASSWORD, is_staff=True)
    return name


def test_a_key_revoked_on_the_keys_page_while_redis_is_down_is_refused_by_every_worker(
    redis_proxy: TcpProxy,
    workers: list[ServerProcess],
    new_tenant: CliTenant,
    staff_user: str,
) -> None:
    key = ApiKey.objects.get(prefix=new_tenant.secret[:11])
    for server in workers:
        assert get_models(server, new_tenant.secret).status_code == 200
    cut_off(redis_proxy, workers)

    with httpx.Client(base_url=workers[0].base_url, timeout=30) as client:
        sign_in(client, staff_user)
        # The page itself reads the usage rollups' watermark from the cache, in Redis: it says
        # so. Its Revoke button posts the form with the CSRF cookie's token.
        page = client.get("/dashboard/keys/")
        assert page.status_code == 503, page.text
        assert "Mortar cannot reach Redis" in page.text
        revoked = client.post(
            f"/dashboard/keys/{key.pk}/revoke",
            data={"csrfmiddlewaretoken": client.cookies["csrftoken"]},
        )
        assert revoked.status_code == 302, revoked.text
        assert revoked.headers["location"] == "/dashboard/keys/"

    key.refresh_from_db()
    assert key.revoked_at is not None
    assert list(key.changes.filter(action="revoked").values_list("actor_name", flat=True)) == [
        staff_user
    ]
    assert NOT_ANNOUNCED in workers[0].log()
    for server in workers:
        assert_refused_key(get_models(server, new_tenant.secret))
        assert "Internal Server Error" not in server.log()


@pytest.fixture(scope="module")
def own_catalog_entry(django_db_setup: None, django_db_blocker) -> Iterator[tuple[str, str]]:
    """A scripted deployment and a model on it of this test's own, committed."""
    suffix = str(time.monotonic_ns())
    with django_db_blocker.unblock():
        deployment = Deployment.objects.create(name=f"outage-{suffix}", stream_default=True)
        model = CatalogModel.objects.create(id=f"outage-model-{suffix}", deployment=deployment)
    yield model.pk, deployment.name
    with django_db_blocker.unblock():
        CatalogModel.objects.filter(pk=model.pk).delete()
        Deployment.objects.filter(pk=deployment.pk).delete()


def test_changes_to_an_organization_a_deployment_and_a_model_while_redis_is_down_apply_everywhere(
    redis_proxy: TcpProxy,
    workers: list[ServerProcess],
    new_tenant: CliTenant,
    own_catalog_entry: tuple[str, str],
) -> None:
    model, deployment = own_catalog_entry
    for server in workers:  # cached by each worker: the key, its organization, the model
        first = complete(server, new_tenant.secret, model)
        assert first.status_code == 200, first.text
        assert first.headers["content-type"].startswith("text/event-stream")
        assert b'"delta":{}' not in first.content
    cut_off(redis_proxy, workers)

    # The organization: its finish chunk gets `"delta": {}` from now on.
    changed = shell_behind(
        redis_proxy,
        "from accounts.models import Organization\n"
        f"o = Organization.objects.get(name={new_tenant.name!r})\n"
        "o.finish_chunk_delta = True\n"
        "o.save()\n",
    )
    assert changed.returncode == 0, changed.stderr
    assert NOT_ANNOUNCED in changed.stderr
    assert Organization.objects.get(name=new_tenant.name).finish_chunk_delta is True
    for server in workers:
        streamed = complete(server, new_tenant.secret, model)
        assert streamed.status_code == 200, streamed.text
        assert b'"delta":{}' in streamed.content

    # The deployment: a request that does not say `stream` is answered in one body now.
    changed = shell_behind(
        redis_proxy,
        "from gateway.models import Deployment\n"
        f"d = Deployment.objects.get(name={deployment!r})\n"
        "d.stream_default = False\n"
        "d.save()\n",
    )
    assert changed.returncode == 0, changed.stderr
    assert NOT_ANNOUNCED in changed.stderr
    assert Deployment.objects.get(name=deployment).stream_default is False
    for server in workers:
        answered = complete(server, new_tenant.secret, model)
        assert answered.status_code == 200, answered.text
        assert answered.headers["content-type"].startswith("application/json")

    # The model: taken out of service, it is refused.
    changed = shell_behind(
        redis_proxy,
        "from gateway.models import CatalogModel\n"
        f"m = CatalogModel.objects.get(pk={model!r})\n"
        "m.deployed = False\n"
        "m.save()\n",
    )
    assert changed.returncode == 0, changed.stderr
    assert NOT_ANNOUNCED in changed.stderr
    assert CatalogModel.objects.get(pk=model).deployed is False
    for server in workers:
        refused = complete(server, new_tenant.secret, model)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "model_not_available"
