"""Run ids that could name no run — a NUL, other control characters, non-ASCII, too long — on the
API's routes that take one: never a 500 (`GET
/v1/chat/completions/runs/%00` once was one, Postgres refusing a NUL in text)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Tenant
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

# As they appear in the path, percent-encoded.
HOSTILE_IDS = [
    "%00",
    "chatcmpl-%00",
    "%01",
    "chatcmpl-00000000000%0A00000000000",
    "%1F",
    "%7F",
    "%C2%80",  # U+0080, a C1 control character
    "%E2%80%AE",  # right-to-left override
    "%F0%9F%92%A5",
    "x" * 41,
]


@pytest.mark.parametrize("run_id", HOSTILE_IDS)
def test_replaying_an_id_that_names_no_run_is_run_gone(
    mortar_server: ServerProcess, tenant: Tenant, run_id: str
) -> None:
    response = httpx.get(
        f"{mortar_server.base_url}/v1/chat/completions/runs/{run_id}",
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=10,
    )

    assert response.status_code == 410
    assert response.json()["code"] == "run_gone"  # the route's flat envelope


@pytest.mark.parametrize("run_id", HOSTILE_IDS)
def test_stopping_an_id_that_names_no_run_is_not_stopped(
    mortar_server: ServerProcess, tenant: Tenant, run_id: str
) -> None:
    """The answer for a generation that is not running: 404 with `stopped: false`."""
    response = httpx.post(
        f"{mortar_server.base_url}/v1/generations/{run_id}/stop",
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=10,
    )

    assert response.status_code == 404
    assert response.json()["stopped"] is False
