"""Replay of Messages runs: `GET /v1/chat/completions/runs/{msg_…}` re-emits the Anthropic events
the client received, byte for byte (the replay route serves any run as it was sent)."""

from __future__ import annotations

import re

import httpx
import orjson
import pytest

from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair

pytestmark = pytest.mark.django_db

ID_LINE = re.compile(rb"^id: (\d+)\n", re.MULTILINE)
MODEL = "Qwen/Qwen2.5-7B-Instruct"
WEATHER_TOOL = {
    "name": "get_weather",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def send(server: ServerProcess, tenant: Tenant, body: dict) -> tuple[str, bytes]:
    """POST a message; return its run id and every byte received."""
    received = b""
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/messages",
        content=orjson.dumps(body),
        headers={"x-api-key": tenant.secret},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        run_id = response.headers["X-Mortar-Run-Id"]
        for raw in response.iter_raw():
            received += raw
    return run_id, received


def replay(server: ServerProcess, tenant: Tenant, run_id: str) -> httpx.Response:
    return httpx.get(
        f"{server.base_url}/v1/chat/completions/runs/{run_id}",
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )


@pytest.mark.parametrize("kind", ["scripted", "tool-use", "upstream", "upstream-with-pings"])
def test_a_replayed_messages_stream_is_the_stream_the_client_received(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair, kind: str
) -> None:
    body = {
        "scripted": {"model": MODEL, "messages": [{"role": "user", "content": "Tell a story."}]},
        "tool-use": {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [WEATHER_TOOL],
        },
        "upstream": {
            "model": "mock-one",
            "messages": [{"role": "user", "content": "[mock chunks=8 cached=3 reasoning=2]"}],
        },
        "upstream-with-pings": {
            "model": "mock-patient",
            "messages": [{"role": "user", "content": "[mock chunks=2 delay_ms=1500]"}],
        },
    }[kind]
    run_id, received = send(mortar_server, tenant, {**body, "max_tokens": 100, "stream": True})
    run = wait_for_run(run_id)
    assert run_id.startswith("msg_") and stored_bytes(run) == received

    replayed = replay(mortar_server, tenant, run_id)
    assert replayed.status_code == 200
    assert replayed.headers["X-Mortar-Run-Id"] == run_id
    assert replayed.headers["content-type"].startswith("text/event-stream")
    assert ID_LINE.sub(b"", replayed.content) == received
    events = received.count(b"\n\n")
    assert [int(i) for i in ID_LINE.findall(replayed.content)] == list(range(events))
    # Each event behind its `id:` line is a whole Anthropic event.
    assert all(
        event.startswith(b"id: ") and b"\nevent: " in event and b"\ndata: {" in event
        for event in replayed.content.split(b"\n\n")
        if event
    )


def test_a_json_message_run_is_replayed_as_its_body(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    run_id, received = send(
        mortar_server,
        tenant,
        {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]},
    )
    wait_for_run(run_id)
    replayed = replay(mortar_server, tenant, run_id)
    assert replayed.status_code == 200
    assert replayed.headers["content-type"].startswith("application/json")
    assert replayed.content == received
    assert replayed.json()["id"] == run_id and replayed.json()["type"] == "message"
