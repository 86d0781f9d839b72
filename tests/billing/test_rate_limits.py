"""Rate limits on real server processes: requests and tokens per minute on a key and on an
organization, held jointly by two workers over Redis (and by the one process in the embedded
mode); the 429 with `Retry-After`, OpenAI's `x-ratelimit-*` headers on refusals and successes.
(A model server's own 429 and 529: tests/gateway/test_upstream_statuses.py.)"""

from __future__ import annotations

import time

import httpx
import orjson
import pytest

from tests.conftest import CliTenant, manage, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.telemetry import Subscriber

pytestmark = pytest.mark.django_db

MODEL = "Qwen/Qwen2.5-7B-Instruct"
QUESTION = [{"role": "user", "content": "What does max_tokens limit?"}]
RATE_HEADERS = {
    f"x-ratelimit-{what}-{unit}"
    for what in ("limit", "remaining", "reset")
    for unit in ("requests", "tokens")
}


def post(
    server: ServerProcess, secret: str, body: dict, path: str = "/v1/chat/completions"
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}{path}",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def ask(server: ServerProcess, secret: str, **extra: object) -> httpx.Response:
    return post(server, secret, {"model": MODEL, "messages": QUESTION, "stream": False, **extra})


def limited_tenant(*limits: str) -> CliTenant:
    """A fresh organization and a key made with `createkey` and its limit options."""
    name = f"org-rl-{time.monotonic_ns()}"
    manage("createorg", name)
    return CliTenant(name=name, secret=manage("createkey", name, *limits).strip())


def organization_limits(tenant: CliTenant, **limits: int) -> None:
    """Set the organization's limits in a process of its own (committed; the servers have not
    looked the organization up yet, so nothing is cached)."""
    assignments = ", ".join(f"{field}={value}" for field, value in limits.items())
    manage(
        "shell",
        "-c",
        "from accounts.models import Organization; "
        f"Organization.objects.filter(name={tenant.name!r}).update({assignments})",
    )


def assert_refused_run(response: httpx.Response) -> None:
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.status, run.http_status, run.error_code) == (
        "refused",
        429,
        "rate_limit_exceeded",
    )
    assert stored_bytes(run) == response.content


@pytest.mark.redis
def test_the_request_after_the_limit_over_two_processes_gets_a_429(
    mortar_server: ServerProcess, second_server: ServerProcess
) -> None:
    tenant = limited_tenant("--rpm", "3")
    servers = [mortar_server, second_server, mortar_server, second_server]
    first, second = ask(servers[0], tenant.secret), ask(servers[1], tenant.secret, stream=True)
    third = ask(servers[2], tenant.secret)
    refused = ask(servers[3], tenant.secret)

    for response, remaining in ((first, "2"), (second, "1"), (third, "0")):
        assert response.status_code == 200
        assert response.headers["x-ratelimit-limit-requests"] == "3"
        assert response.headers["x-ratelimit-remaining-requests"] == remaining
    assert second.headers["content-type"].startswith("text/event-stream")
    # No token limit is set: only the requests' headers.
    assert "x-ratelimit-limit-tokens" not in first.headers

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    # One request of three a minute comes back every 20 s; the burst took well under 2 s.
    assert refused.headers["Retry-After"] in {"19", "20"}
    assert refused.headers["x-ratelimit-limit-requests"] == "3"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"].endswith("s")
    assert_refused_run(refused)


def test_a_key_over_its_requests_per_minute_is_refused_in_this_process(
    mortar_server: ServerProcess,
) -> None:
    # The one process of the embedded mode as much as with Redis.
    tenant = limited_tenant("--rpm", "2")
    subscriber = Subscriber(mortar_server, tenant.secret)
    assert [ask(mortar_server, tenant.secret).status_code for _ in range(2)] == [200, 200]
    refused = ask(mortar_server, tenant.secret)
    assert refused.status_code == 429
    assert 29 <= int(refused.headers["Retry-After"]) <= 30
    assert_refused_run(refused)

    # The refusal is in the organization's telemetry stream, as a failed generation.
    run_id = refused.headers["X-Mortar-Run-Id"]
    subscriber.wait_for(
        lambda events: any(
            e["type"] == "generation.failed" and e["runId"] == run_id for e in events
        )
    )
    subscriber.close()
    [failed] = [
        e for _, e in subscriber.events if e["type"] == "generation.failed" and e["runId"] == run_id
    ]
    assert (failed["httpStatus"], failed["code"]) == (429, "rate_limit_exceeded")


def test_tokens_admit_the_prompt_and_count_the_whole_usage_when_it_ends(
    mortar_server: ServerProcess,
) -> None:
    tenant = limited_tenant()
    # 40 a minute: a token every 1.5 s. The example is 17 prompt and 13 completion tokens:
    # it fits once (30), and a second prompt does not fit beside it (47).
    organization_limits(tenant, tokens_per_minute=40)

    first = ask(mortar_server, tenant.secret)
    assert first.status_code == 200
    usage = first.json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (17, 13)
    assert first.headers["x-ratelimit-limit-tokens"] == "40"
    # Admitted on its prompt: the headers are those of the admission (17 tokens of 1.5 s to reset).
    assert first.headers["x-ratelimit-remaining-tokens"] == "23"
    assert first.headers["x-ratelimit-reset-tokens"] == "25.5s"
    assert "x-ratelimit-limit-requests" not in first.headers

    refused = ask(mortar_server, tenant.secret)
    assert refused.status_code == 429
    assert "tokens per minute on the organization (limit 40)" in refused.json()["error"]["message"]
    # The first request's whole usage (30) is in the window when it ends: this prompt fits
    # once 7 tokens have come back, 10.5 s (less the moment between the two requests).
    assert refused.headers["Retry-After"] in {"10", "11"}
    assert refused.headers["x-ratelimit-remaining-tokens"] in {"10", "11"}
    assert_refused_run(refused)


def test_the_key_s_and_the_organization_s_limits_both_apply(
    mortar_server: ServerProcess,
) -> None:
    tenant = limited_tenant("--rpm", "5", "--tpm", "100000")
    organization_limits(tenant, requests_per_minute=1)

    first = ask(mortar_server, tenant.secret)
    assert first.status_code == 200
    assert set(first.headers) >= RATE_HEADERS
    # The tighter of the two: the organization's one request a minute.
    assert first.headers["x-ratelimit-limit-requests"] == "1"
    assert first.headers["x-ratelimit-remaining-requests"] == "0"
    assert first.headers["x-ratelimit-reset-requests"] == "1m0s"
    assert first.headers["x-ratelimit-limit-tokens"] == "100000"

    refused = ask(mortar_server, tenant.secret)
    assert refused.status_code == 429
    assert set(refused.headers) >= RATE_HEADERS
    assert 59 <= int(refused.headers["Retry-After"]) <= 60
    message = refused.json()["error"]["message"]
    assert "requests per minute on the organization (limit 1)" in message
    assert "on the key" not in message


def test_on_messages_a_429_is_anthropics_rate_limit_error(mortar_server: ServerProcess) -> None:
    tenant = limited_tenant("--rpm", "1")
    body = {"model": MODEL, "max_tokens": 50, "messages": QUESTION}
    assert post(mortar_server, tenant.secret, body, "/v1/messages").status_code == 200

    refused = post(mortar_server, tenant.secret, body, "/v1/messages")
    assert refused.status_code == 429
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert "code" not in refused.json()["error"]
    assert 59 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert_refused_run(refused)
