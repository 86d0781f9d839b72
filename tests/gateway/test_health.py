"""/healthz, /readyz, unknown routes, and the same app served by daphne."""

from __future__ import annotations

import os
import re
from importlib.metadata import version

import httpx
import pytest

from mortar import __version__
from tests.conftest import Tenant, _server_env
from tests.support.servers import ServerProcess, start_mortar

pytestmark = pytest.mark.django_db


def test_healthz_needs_no_key(mortar_server: ServerProcess) -> None:
    response = httpx.get(f"{mortar_server.base_url}/healthz")
    assert response.status_code == 200
    assert response.json() == {"ok": True}
    assert response.headers["X-Request-Id"]


@pytest.mark.redis
def test_readyz_checks_the_database_and_redis(mortar_server: ServerProcess) -> None:
    body = httpx.get(f"{mortar_server.base_url}/readyz").json()
    assert body["ok"] is True
    assert body["database"] == "ok"
    assert body["redis"] == "ok"
    assert set(body["run_writer"]) == {
        "queue_depth",
        "lag_seconds",
        "spooled",
        "spilled_total",
        "last_error",
    }
    assert body["run_writer"]["spooled"] == 0
    assert body["run_writer"]["spilled_total"] == 0


def test_readyz_checks_the_database_and_the_backplane(mortar_server: ServerProcess) -> None:
    body = httpx.get(f"{mortar_server.base_url}/readyz").json()
    backplane = {"services": "redis", "embedded": "memory"}[os.environ["MORTAR_TEST_BACKENDS"]]
    assert body["ok"] is True
    assert (body["database"], body[backplane]) == ("ok", "ok")


def test_readyz_names_the_release_the_package_declares(mortar_server: ServerProcess) -> None:
    body = httpx.get(f"{mortar_server.base_url}/readyz").json()

    assert body["version"] == __version__ == version("mortar")  # one source: pyproject reads it
    assert re.fullmatch(r"0\.(0|[1-9]\d*)\.(0|[1-9]\d*)", body["version"])  # SemVer, 0.x


def test_models_needs_a_key(mortar_server: ServerProcess) -> None:
    response = httpx.get(f"{mortar_server.base_url}/v1/models")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "missing_key"
    assert response.headers["X-Request-Id"]


def test_an_unknown_route_answers_the_envelope_not_html(mortar_server: ServerProcess) -> None:
    response = httpx.get(f"{mortar_server.base_url}/v1/nowhere")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "not_found"


def test_a_wrong_method_answers_the_envelope(mortar_server, tenant: Tenant) -> None:
    response = httpx.get(
        f"{mortar_server.base_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {tenant.secret}"},
    )
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_daphne_serves_the_same_app(tenant: Tenant, tmp_path) -> None:
    server = start_mortar(_server_env(), log_dir=tmp_path, server="daphne")
    try:
        response = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "What does max_tokens limit?"}]},
            headers={"Authorization": f"Bearer {tenant.secret}"},
        )
    finally:
        server.stop()
    assert response.status_code == 200
    assert response.text.endswith("data: [DONE]\n\n")
    assert "It caps how" in response.text
