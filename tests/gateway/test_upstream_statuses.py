"""A model server's own 429 and 529: passed on as Mortar's errors, with its `Retry-After` when
it gave one in seconds, and the run recorded as refused or failed."""

from __future__ import annotations

import httpx
import pytest

from gateway.upstream.client import error_for_upstream_status
from tests.billing.test_rate_limits import assert_refused_run, post
from tests.conftest import CliTenant, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_a_model_server_s_429_arrives_with_its_retry_after(
    mortar_server: ServerProcess, new_tenant: CliTenant, upstream_models: MockPair, stream: bool
) -> None:
    response = post(
        mortar_server,
        new_tenant.secret,
        {
            "model": "mock-one",
            "messages": [
                {"role": "user", "content": "[mock fault=status status=429 retry_after=7]"}
            ],
            "stream": stream,
        },
    )
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "7"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    assert_refused_run(response)


def test_a_model_server_s_529_is_overloaded(
    mortar_server: ServerProcess, new_tenant: CliTenant, upstream_models: MockPair
) -> None:
    response = post(
        mortar_server,
        new_tenant.secret,
        {
            "model": "mock-one",
            "messages": [{"role": "user", "content": "[mock fault=status status=529]"}],
            "stream": False,
        },
    )
    assert response.status_code == 529
    assert response.json()["error"]["code"] == "overloaded"
    assert "Retry-After" not in response.headers
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.status, run.http_status, run.error_code) == ("failed", 529, "overloaded")


def test_a_model_server_s_429_without_retry_after_sends_none(
    mortar_server: ServerProcess, new_tenant: CliTenant, upstream_models: MockPair
) -> None:
    response = post(
        mortar_server,
        new_tenant.secret,
        {
            "model": "mock-one",
            "messages": [{"role": "user", "content": "[mock fault=status status=429]"}],
            "stream": False,
        },
    )
    assert response.status_code == 429
    assert "Retry-After" not in response.headers


HTTP_DATE = "Wed, 21 Oct 2026 07:28:00 GMT"  # a Retry-After Mortar does not pass on


@pytest.mark.parametrize(
    ("status", "headers", "message", "expected"),
    [
        (429, {"Retry-After": "7"}, "slow down", (429, "rate_limit_exceeded", 7)),
        (429, {"Retry-After": "0.2"}, "slow down", (429, "rate_limit_exceeded", 1)),
        (429, {"Retry-After": HTTP_DATE}, "slow down", (429, "rate_limit_exceeded", None)),
        (529, {}, "busy", (529, "overloaded", None)),
        (503, {}, "Engine overloaded, try later", (529, "overloaded", None)),
        (503, {}, "down for maintenance", (502, "upstream_error", None)),
        (400, {}, "bad top_k", (400, "upstream_error", None)),
    ],
    ids=["seconds", "fraction", "http-date", "529", "503-overloaded", "503", "400"],
)  # fmt: skip
def test_a_model_server_s_status_maps_to_mortar_s_error(
    status: int, headers: dict[str, str], message: str, expected: tuple
) -> None:
    response = httpx.Response(status, headers=headers)
    error = error_for_upstream_status(response, message)
    assert (error.status, error.code, error.retry_after) == expected
