"""Who may read /metrics: with MORTAR_METRICS_TOKEN unset, only a client on this machine that
is not a proxy forwarding someone else; with it set, only a request bearing it."""

from __future__ import annotations

import httpx
import pytest
from django.test import RequestFactory

from telemetry.scrape import metrics_scrape
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

TOKEN = "a-metrics-token-for-tests"


def scrape(remote_addr: str, **headers: str) -> int:
    request = RequestFactory().get("/metrics", REMOTE_ADDR=remote_addr, headers=headers)
    return metrics_scrape(request).status_code


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1"])
def test_without_a_token_a_loopback_client_reads_the_metrics(settings, address: str) -> None:  # type: ignore[no-untyped-def]
    settings.MORTAR_METRICS_TOKEN = ""
    assert scrape(address) == 200


@pytest.mark.parametrize("address", ["10.0.0.7", "192.168.1.20", "172.17.0.1", "2001:db8::1", ""])
def test_without_a_token_any_other_client_is_refused(settings, address: str) -> None:  # type: ignore[no-untyped-def]
    settings.MORTAR_METRICS_TOKEN = ""
    request = RequestFactory().get("/metrics", REMOTE_ADDR=address)
    response = metrics_scrape(request)
    assert response.status_code == 403
    assert b"only clients on this machine" in response.content
    # A bogus token changes nothing when none is configured.
    assert scrape(address, Authorization="Bearer anything") == 403


@pytest.mark.parametrize(
    "header",
    [
        {"X-Forwarded-For": "203.0.113.9"},
        {"Forwarded": "for=203.0.113.9"},
        {"X-Real-IP": "203.0.113.9"},
    ],
)
def test_without_a_token_a_proxy_on_this_machine_is_refused(settings, header) -> None:  # type: ignore[no-untyped-def]
    settings.MORTAR_METRICS_TOKEN = ""
    assert scrape("127.0.0.1", **header) == 403


def test_with_a_token_only_the_token_counts_even_on_loopback(settings) -> None:  # type: ignore[no-untyped-def]
    settings.MORTAR_METRICS_TOKEN = TOKEN
    assert scrape("127.0.0.1") == 401
    assert scrape("127.0.0.1", Authorization="Bearer wrong") == 401
    assert scrape("10.0.0.7", Authorization=f"Bearer {TOKEN}") == 200


def test_a_server_without_a_token_answers_loopback_but_not_a_forwarded_client(
    mortar_server: ServerProcess,
) -> None:
    url = f"{mortar_server.base_url}/metrics"
    assert httpx.get(url, timeout=10).status_code == 200
    forwarded = httpx.get(url, headers={"X-Forwarded-For": "203.0.113.9"}, timeout=10)
    assert forwarded.status_code == 403
    assert "mortar_" not in forwarded.text
