"""API clients know a model server by its replica name, `<deployment>/<position>`, never by its
URL; operators see the URL in the stored run (the internal URL was once in
`X-Mortar-Upstream`, in error messages and in telemetry events)."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import Tenant, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.telemetry import Subscriber
from tests.support.upstreams import MockPair

pytestmark = pytest.mark.django_db


def complete(server: ServerProcess, tenant: Tenant, model: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": False},
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )


def address(url: str) -> str:
    return urlsplit(url).netloc  # host:port


def test_clients_see_the_replicas_name_and_operators_its_url(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair
) -> None:
    subscriber = Subscriber(mortar_server, tenant.secret)
    response = complete(mortar_server, tenant, "mock-one")
    run_id = response.headers["X-Mortar-Run-Id"]
    subscriber.wait_for(
        lambda events: any(e["type"] == "cache" and e["runId"] == run_id for e in events)
    )
    subscriber.close()

    assert response.status_code == 200
    assert response.headers["X-Mortar-Upstream"] == "mock-one/0"
    url = MockPair.url(upstream_models.a)
    assert not any(address(url) in value for value in response.headers.values())
    events = [event for _, event in subscriber.events if event["runId"] == run_id]
    routed = next(event for event in events if event["type"] == "request.routed")
    assert routed["replica"] == "mock-one/0"
    assert not any(address(url) in str(event) for event in events)
    assert wait_for_run(run_id).replica == url


def test_an_unreachable_replica_is_named_not_addressed(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair, dead_url: str
) -> None:
    subscriber = Subscriber(mortar_server, tenant.secret)
    response = complete(mortar_server, tenant, "mock-dead")
    run_id = response.headers["X-Mortar-Run-Id"]
    subscriber.wait_for(
        lambda events: any(
            e["type"] == "generation.failed" and e["runId"] == run_id for e in events
        )
    )
    subscriber.close()
    failed = next(
        e for _, e in subscriber.events if e["type"] == "generation.failed" and e["runId"] == run_id
    )

    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "upstream_unavailable"
    assert error["message"] == "The model server mock-dead/0 could not be reached."
    assert address(dead_url) not in response.text
    assert failed["message"] == error["message"]
    assert wait_for_run(run_id).error_message == error["message"]


def test_no_answer_a_client_can_get_holds_a_model_server_s_address(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair, dead_url: str
) -> None:
    """No model server's address on any surface: streamed and JSON chat completions,
    the Messages route, their 503s, replay, the model list and the health checks."""
    addresses = [address(MockPair.url(upstream_models.a)), address(dead_url)]
    auth = {"Authorization": f"Bearer {tenant.secret}"}
    base = mortar_server.base_url
    seen: list[httpx.Response] = []
    for model in ("mock-one", "mock-dead"):
        chat = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        seen.append(httpx.post(f"{base}/v1/chat/completions", json=chat, headers=auth, timeout=30))
        seen.append(
            httpx.post(
                f"{base}/v1/chat/completions",
                json={**chat, "stream": False},
                headers=auth,
                timeout=30,
            )
        )
        seen.append(
            httpx.post(
                f"{base}/v1/messages",
                json={**chat, "max_tokens": 50},
                headers={"x-api-key": tenant.secret},
                timeout=30,
            )
        )
    assert [response.status_code for response in seen] == [200, 200, 200, 503, 503, 503]
    assert [r.headers.get("X-Mortar-Upstream") for r in seen[:3]] == ["mock-one/0"] * 3
    for response in seen[:3]:
        run_id = response.headers["X-Mortar-Run-Id"]
        wait_for_run(run_id)
        replay = httpx.get(f"{base}/v1/chat/completions/runs/{run_id}", headers=auth, timeout=30)
        assert replay.status_code == 200  # every surface's runs replay on this route
        seen.append(replay)
    seen.append(httpx.get(f"{base}/v1/models", headers=auth, timeout=30))
    seen.append(httpx.get(f"{base}/readyz", timeout=30))
    seen.append(httpx.get(f"{base}/healthz", timeout=30))

    for response in seen:
        shown = response.text + "".join(f"{k}: {v}\n" for k, v in response.headers.items())
        for where in addresses:
            assert where not in shown, (response.request.url, shown)
