"""In-flight dedupe across two worker processes: one generation, shared answers, conflicts."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pytest

from telemetry.models import Run
from tests.conftest import wait_for_run
from tests.support.upstreams import MockPair, mock_reset, mock_stats
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db

SLOW = {
    "model": "mock-patient",
    "stream": False,
    "messages": [{"role": "user", "content": "[mock chunks=10 delay_ms=150]"}],
}


def post(server, tenant, body: dict, key: str | None = "op-1", **headers) -> httpx.Response:
    sent = {"Authorization": f"Bearer {tenant.secret}", "X-Mortar-Dedupe": "in-flight", **headers}
    if key is not None:
        sent["Idempotency-Key"] = key
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers=sent,
        timeout=30,
    )


def concurrently(calls) -> list[httpx.Response]:  # type: ignore[no-untyped-def]
    results: list = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(i: int) -> None:
        barrier.wait()
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.mark.redis
def test_twenty_identical_requests_over_two_processes_share_one_generation(
    mortar_server, second_server, tenant, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    servers = [mortar_server, second_server]
    responses = concurrently(
        [lambda i=i: post(servers[i % 2], tenant, SLOW, key="twenty") for i in range(20)]
    )

    assert [r.status_code for r in responses] == [200] * 20
    assert mock_stats(upstream_models.a)["requests"] == 1  # exactly one generation upstream
    roles = [r.headers["X-Mortar-Dedupe"] for r in responses]
    assert sorted(roles) == ["leader"] + ["shared"] * 19
    leader = responses[roles.index("leader")]
    leader_id = leader.json()["id"]
    assert {r.json()["id"] for r in responses} == {leader_id}
    assert {r.headers["X-Mortar-Request-Id"] for r in responses} == {leader_id}
    assert {r.content for r in responses} == {leader.content}

    run_ids = {r.headers["X-Mortar-Run-Id"] for r in responses}
    assert len(run_ids) == 20  # every request is a run of its own
    runs = [wait_for_run(run_id) for run_id in run_ids]
    shared = [run for run in runs if run.dedupe_role == "shared"]
    assert len(shared) == 19
    assert {run.dedupe_leader for run in shared} == {leader_id}
    assert all(run.cost == 0 and run.status == "completed" for run in shared)
    assert Run.objects.get(pk=leader_id).dedupe_role == "leader"


@pytest.mark.redis
def test_the_same_key_with_a_different_request_is_a_409(
    mortar_server, second_server, tenant, upstream_models
) -> None:
    other = {**SLOW, "messages": [{"role": "user", "content": "something else"}]}
    mock_reset(upstream_models.a)
    first: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: first.append(post(mortar_server, tenant, SLOW, key="clash"))
    )
    thread.start()
    # The leader holds the key while its generation is with the model server.
    wait_until(
        lambda: mock_stats(upstream_models.a)["requests"] >= 1,
        message="the first request never reached the model server",
    )
    conflict = post(second_server, tenant, other, key="clash")
    thread.join(60)
    (leader,) = first
    assert leader.status_code == 200
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_conflict"
    assert wait_for_run(conflict.headers["X-Mortar-Run-Id"]).status == "refused"


def test_nothing_is_cached_after_completion(mortar_server, tenant, upstream_models) -> None:
    fast = {**SLOW, "messages": [{"role": "user", "content": "[mock chunks=2]"}]}
    first = post(mortar_server, tenant, fast, key="again")
    second = post(mortar_server, tenant, fast, key="again")
    assert first.headers["X-Mortar-Dedupe"] == second.headers["X-Mortar-Dedupe"] == "leader"
    assert first.json()["id"] != second.json()["id"]


def test_the_key_is_scoped_to_the_tenant(
    mortar_server, tenant, other_tenant, upstream_models
) -> None:
    mine, theirs = concurrently(
        [
            lambda: post(mortar_server, tenant, SLOW, key="scoped"),
            lambda: post(mortar_server, other_tenant, SLOW, key="scoped"),
        ]
    )
    assert mine.headers["X-Mortar-Dedupe"] == theirs.headers["X-Mortar-Dedupe"] == "leader"
    assert mine.json()["id"] != theirs.json()["id"]


@pytest.mark.parametrize(
    ("body", "key", "headers", "param"),
    [
        ({"stream": True}, "k", {}, "stream"),
        ({}, None, {}, "Idempotency-Key"),
        ({}, "has space", {}, "Idempotency-Key"),
        ({}, "x" * 129, {}, "Idempotency-Key"),
        ({}, "k", {"X-Mortar-Dedupe": "forever"}, "X-Mortar-Dedupe"),
    ],
    ids=["streaming", "no-key", "bad-key", "long-key", "unknown-mode"],
)
def test_a_malformed_dedupe_request_is_a_400(mortar_server, tenant, body, key, headers, param):
    response = post(
        mortar_server,
        tenant,
        {"messages": [{"role": "user", "content": "hi"}], "stream": False, **body},
        key=key,
        **headers,
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_parameter"
    assert response.json()["error"]["param"] == param


def test_identical_requests_to_one_process_share_one_generation(
    mortar_server, tenant, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    responses = concurrently([lambda: post(mortar_server, tenant, SLOW, key="one")] * 5)

    assert [r.status_code for r in responses] == [200] * 5
    assert mock_stats(upstream_models.a)["requests"] == 1
    roles = [r.headers["X-Mortar-Dedupe"] for r in responses]
    assert sorted(roles) == ["leader"] + ["shared"] * 4
    leader = responses[roles.index("leader")]
    assert {r.json()["id"] for r in responses} == {leader.json()["id"]}
    assert {r.content for r in responses} == {leader.content}


def test_one_process_refuses_the_same_key_with_a_different_request(
    mortar_server, tenant, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    other = {**SLOW, "messages": [{"role": "user", "content": "something else"}]}
    with ThreadPoolExecutor(1) as pool:
        leading = pool.submit(post, mortar_server, tenant, SLOW, key="clash-here")
        deadline = time.monotonic() + 10
        while mock_stats(upstream_models.a)["in_flight"] < 1:  # the leader is generating
            assert time.monotonic() < deadline, "the leader never reached the model server"
            time.sleep(0.02)
        conflict = post(mortar_server, tenant, other, key="clash-here")
        leader = leading.result(30)
    assert leader.status_code == 200
    assert leader.headers["X-Mortar-Dedupe"] == "leader"
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_conflict"
