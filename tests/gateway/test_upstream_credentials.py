"""Upstream URLs with credentials: refused by `applyconfig` and by the
admin, and a deployment stored with one before the check is recorded as the 500 it answers,
never as a client that went away."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import httpx
import orjson
import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from gateway.models import CatalogModel, Deployment
from tests.conftest import Tenant, wait_for_run
from tests.support.servers import ServerProcess, free_port

pytestmark = pytest.mark.django_db

PASSWORD = "hunter2-not-for-logs"
CONFIG = """
deployments:
  - name: with-credentials
    upstreams: ["http://127.0.0.1:9001/v1", "{url}"]
models:
  - id: credentials-model
    deployment: with-credentials
"""


@pytest.mark.parametrize(
    "url",
    [
        f"http://mortar:{PASSWORD}@127.0.0.1:9002/v1",
        f"https://:{PASSWORD}@vllm.internal/v1",
        "http://just-a-user@127.0.0.1:9002/v1",
    ],
)
def test_applyconfig_refuses_an_upstream_url_with_credentials(tmp_path: Path, url: str) -> None:
    path = tmp_path / "mortar.yaml"
    path.write_text(CONFIG.format(url=url))

    with pytest.raises(CommandError) as refused:
        call_command("applyconfig", str(path), stdout=StringIO())

    message = str(refused.value)
    assert "credentials do not belong in an upstream URL" in message
    assert "api_key_env" in message
    assert PASSWORD not in message
    assert not Deployment.objects.filter(name="with-credentials").exists()
    assert not CatalogModel.objects.filter(id="credentials-model").exists()


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1", "http://", "http://127.0.0.1:99999/v1"])
def test_applyconfig_refuses_an_upstream_url_no_server_is_at(tmp_path: Path, url: str) -> None:
    path = tmp_path / "mortar.yaml"
    path.write_text(CONFIG.format(url=url))

    with pytest.raises(CommandError, match="upstreams"):
        call_command("applyconfig", str(path), stdout=StringIO())
    assert not Deployment.objects.filter(name="with-credentials").exists()


def admin_form(upstreams: list[str]) -> dict[str, object]:
    return {
        "name": "admin-credentials",
        "kind": Deployment.Kind.UPSTREAM,
        "optimizer_mode": Deployment.OptimizerMode.SHADOW,
        "stream_default": "on",
        "scripted_delay_ms": "0",
        "upstreams": orjson.dumps(upstreams).decode(),
        "upstream_model": "",
        "api_key_env": "",
        "connect_timeout_s": "5",
        "first_byte_timeout_s": "60",
        "chunk_timeout_s": "60",
        "total_timeout_s": "600",
        "usage_count": Deployment.UsageCount.ESTIMATE,
        "chat_template": "",
    }


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("credentials-admin"))
    return client


def test_the_admin_refuses_an_upstream_url_with_credentials(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/gateway/deployment/add/",
        admin_form(["http://127.0.0.1:9001/v1", f"http://mortar:{PASSWORD}@127.0.0.1:9002/v1"]),
    )

    assert response.status_code == 200  # the form again, with its errors
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["upstreams"]
    assert "credentials do not belong in an upstream URL" in errors["upstreams"][0]
    assert PASSWORD not in errors["upstreams"][0]
    assert not Deployment.objects.filter(name="admin-credentials").exists()


def test_the_admin_saves_upstream_urls_without_credentials(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/gateway/deployment/add/", admin_form(["http://127.0.0.1:9001/v1"])
    )

    assert response.status_code == 302
    deployment = Deployment.objects.get(name="admin-credentials")
    assert deployment.upstreams == ["http://127.0.0.1:9001/v1"]


@pytest.fixture(scope="module")
def stored_with_credentials(
    django_db_setup: None, django_db_blocker, sees_other_connections: None
) -> str:
    """A deployment stored with a credential URL before the check existed, committed."""
    with django_db_blocker.unblock():
        deployment, _ = Deployment.objects.update_or_create(
            name="stored-credentials",
            defaults={
                "kind": Deployment.Kind.UPSTREAM,
                "upstreams": [f"http://mortar:{PASSWORD}@127.0.0.1:{free_port()}/v1"],
            },
        )
        CatalogModel.objects.update_or_create(
            id="stored-credentials-model", defaults={"deployment": deployment}
        )
    return "stored-credentials-model"


def test_a_stored_credential_url_is_recorded_as_the_500_it_answers(
    mortar_server: ServerProcess, tenant: Tenant, stored_with_credentials: str
) -> None:
    response = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        json={
            "model": stored_with_credentials,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": False,
        },
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert PASSWORD not in response.text
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.status, run.http_status, run.error_code) == ("failed", 500, "internal_error")
