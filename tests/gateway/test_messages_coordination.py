"""Stop, in-flight dedupe, live telemetry and cost on the Messages route, as for chat."""

from __future__ import annotations

import threading
from decimal import Decimal

import httpx
import orjson
import pytest

from telemetry.models import Run
from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.telemetry import Subscriber
from tests.support.upstreams import MockPair, mock_reset, mock_stats
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db

# Two pieces at once, then a silence far longer than any stop takes (the deployment waits 10 s
# between chunks): a stream that ends before the third piece was ended by the stop.
SILENT = {
    "model": "mock-patient",
    "max_tokens": 100,
    "stream": True,
    "messages": [{"role": "user", "content": "[mock chunks=3 delay_ms=8000]"}],
}
SLOW_JSON = {
    "model": "mock-patient",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "[mock chunks=10 delay_ms=150 cached=4]"}],
}


def stop(server: ServerProcess, tenant: Tenant, run_id: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/generations/{run_id}/stop",
        headers={"Authorization": f"Bearer {tenant.secret}"},
    )


class StreamingMessage:
    """Streams one message on a thread, collecting its bytes as they arrive."""

    def __init__(self, server: ServerProcess, tenant: Tenant, body: dict) -> None:
        self.received = b""
        self.run_id = ""
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(server, tenant, body))
        self._thread.start()

    def _run(self, server: ServerProcess, tenant: Tenant, body: dict) -> None:
        with httpx.stream(
            "POST",
            f"{server.base_url}/v1/messages",
            content=orjson.dumps(body),
            headers={"x-api-key": tenant.secret},
            timeout=60,
        ) as response:
            self.run_id = response.headers["X-Mortar-Run-Id"]
            for raw in response.iter_raw():
                self.received += raw
                if b'"text":"tok0"' in self.received:
                    self._started.set()

    def wait_started(self) -> str:
        assert self._started.wait(15), "the stream did not start"
        return self.run_id

    def join(self) -> bytes:
        self._thread.join(60)
        assert not self._thread.is_alive()
        return self.received


@pytest.mark.redis
def test_a_stop_for_a_msg_id_sent_to_another_process_ends_the_stream(
    mortar_server: ServerProcess,
    second_server: ServerProcess,
    tenant: Tenant,
    upstream_models: MockPair,
) -> None:
    mock_reset(upstream_models.a)
    client = StreamingMessage(mortar_server, tenant, SILENT)
    run_id = client.wait_started()
    assert run_id.startswith("msg_")

    assert stop(second_server, tenant, "msg_warm-up").status_code == 404  # B has served before
    response = stop(second_server, tenant, run_id)
    received = client.join()

    assert response.status_code == 200
    assert response.json() == {"stopped": True, "id": run_id}
    assert b"tok1" not in received  # ended while the model was silent
    # The stream still ends as Anthropic's streams end: the block, the message, its stop.
    events = [event for event in received.split(b"\n\n") if event]
    assert [event.split(b"\n")[0] for event in events[-3:]] == [
        b"event: content_block_stop",
        b"event: message_delta",
        b"event: message_stop",
    ]
    assert orjson.loads(events[-2].split(b"\n")[1][6:])["delta"]["stop_reason"] == "end_turn"

    run = wait_for_run(run_id)
    assert (run.status, run.finish_reason) == ("stopped", "stopped")
    assert stored_bytes(run) == received
    wait_until(
        lambda: mock_stats(upstream_models.a)["in_flight"] == 0,
        message="the model server still streams",
    )
    assert mock_stats(upstream_models.a)["cancelled"] == 1  # the model server stopped
    assert stop(second_server, tenant, run_id).status_code == 404  # not twice


def post_deduped(server: ServerProcess, tenant: Tenant, body: dict, key: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/messages",
        content=orjson.dumps(body),
        headers={
            "x-api-key": tenant.secret,
            "X-Mortar-Dedupe": "in-flight",
            "Idempotency-Key": key,
        },
        timeout=30,
    )


@pytest.mark.redis
def test_identical_messages_over_two_processes_share_one_generation(
    mortar_server: ServerProcess,
    second_server: ServerProcess,
    tenant: Tenant,
    upstream_models: MockPair,
) -> None:
    mock_reset(upstream_models.a)
    servers = [mortar_server, second_server]
    responses: list[httpx.Response | None] = [None] * 8
    barrier = threading.Barrier(len(responses))

    def run(i: int) -> None:
        barrier.wait()
        responses[i] = post_deduped(servers[i % 2], tenant, SLOW_JSON, "messages-eight")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(responses))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    answered = [response for response in responses if response is not None]

    assert [r.status_code for r in answered] == [200] * 8
    assert mock_stats(upstream_models.a)["requests"] == 1  # one generation upstream
    roles = [r.headers["X-Mortar-Dedupe"] for r in answered]
    assert sorted(roles) == ["leader"] + ["shared"] * 7
    leader = answered[roles.index("leader")]
    leader_id = leader.json()["id"]
    assert leader_id.startswith("msg_")
    assert {r.content for r in answered} == {leader.content}  # the leader's Message, shared
    assert {r.headers["X-Mortar-Request-Id"] for r in answered} == {leader_id}

    runs = [wait_for_run(r.headers["X-Mortar-Run-Id"]) for r in answered]
    shared = [run for run in runs if run.dedupe_role == "shared"]
    assert len(shared) == 7
    assert all(run.cost == 0 and run.dedupe_leader == leader_id for run in shared)
    leader_run = Run.objects.get(pk=leader_id)
    # The shared runs record the leader's usage, read back from the Message into the runs' shape.
    assert all(run.usage == leader_run.usage for run in shared)
    assert leader_run.usage["prompt_tokens_details"] == {"cached_tokens": 4}


def test_the_same_key_with_a_different_message_is_a_409_in_anthropics_envelope(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    first: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: first.append(post_deduped(mortar_server, tenant, SLOW_JSON, "clash-msg"))
    )
    thread.start()
    wait_until(
        lambda: mock_stats(upstream_models.a)["requests"] >= 1,
        message="the first request never reached the model server",
    )
    other = {**SLOW_JSON, "messages": [{"role": "user", "content": "something else"}]}
    conflict = post_deduped(mortar_server, tenant, other, "clash-msg")
    thread.join(60)

    assert first[0].status_code == 200
    assert conflict.status_code == 409
    assert conflict.json()["type"] == "error"
    assert conflict.json()["error"]["type"] == "invalid_request_error"
    assert "code" not in conflict.json()["error"]
    assert wait_for_run(conflict.headers["X-Mortar-Run-Id"]).error_code == "idempotency_conflict"


def test_a_messages_run_has_chats_live_events_and_cost(
    mortar_server: ServerProcess, tenant: Tenant, priced_model: str
) -> None:
    subscriber = Subscriber(mortar_server, tenant.secret)
    response = httpx.post(
        f"{mortar_server.base_url}/v1/messages",
        content=orjson.dumps(
            {
                "model": priced_model,
                "max_tokens": 200,
                "system": "You are a concise assistant for an inference platform.",
                "messages": [{"role": "user", "content": "What does max_tokens limit?"}],
            }
        ),
        headers={"x-api-key": tenant.secret},
        timeout=30,
    )
    run_id = response.json()["id"]
    subscriber.wait_for(
        lambda events: any(e["type"] == "cost" and e["runId"] == run_id for e in events)
    )
    subscriber.close()

    events = [event for _, event in subscriber.events if event["runId"] == run_id]
    assert [event["type"] for event in events] == [
        "request.accepted",
        "optimizer.report",
        "request.routed",
        "generation.first_token",
        "generation.finished",
        "cache",
        "cost",
    ]
    cost = events[-1]
    assert (cost["promptTokens"], cost["completionTokens"], cost["usageSource"]) == (
        32,
        13,
        "estimate",
    )
    # 32 input tokens at 1 per million, 13 output tokens at 2 per million.
    assert Decimal(cost["cost"]) == Decimal("0.000058")
    assert wait_for_run(run_id).cost == Decimal("0.000058")
