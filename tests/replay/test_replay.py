"""GET /v1/chat/completions/runs/{id}: stored runs replayed byte for byte, resumable, live."""

from __future__ import annotations

import re
import threading
import time

import httpx
import orjson
import psycopg
import pytest
from django.conf import settings

from tests.conftest import Tenant, manage, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess, stream_completion
from tests.support.upstreams import MockPair

pytestmark = pytest.mark.django_db

ID_LINE = re.compile(rb"^id: (\d+)\n", re.MULTILINE)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def committed(statement: str, params: tuple[str, ...]) -> None:
    """Run a statement on a connection of its own, committed: the server process sees it."""
    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True
    ) as connection:
        connection.execute(statement, params)


def stream(server: ServerProcess, tenant: Tenant, body: dict) -> tuple[str, bytes]:
    received = b""
    with stream_completion(server, tenant.secret, body, timeout=30) as response:
        for raw in response.iter_raw():
            received += raw
        return response.headers["X-Mortar-Run-Id"], received


def replay(server: ServerProcess, secret: str, run_id: str, **options) -> httpx.Response:
    headers = {"Authorization": f"Bearer {secret}", **options.pop("headers", {})}
    return httpx.get(
        f"{server.base_url}/v1/chat/completions/runs/{run_id}",
        params=options,
        headers=headers,
        timeout=30,
    )


def without_ids(body: bytes) -> bytes:
    return ID_LINE.sub(b"", body)


def stream_then_stop(server: ServerProcess, tenant: Tenant, body: dict) -> tuple[str, bytes]:
    """Stream a completion and press Stop after its first pieces; return what arrived."""
    received = b""
    with stream_completion(server, tenant.secret, body, timeout=30) as response:
        run_id = response.headers["X-Mortar-Run-Id"]
        stopped = False
        for raw in response.iter_raw():
            received += raw
            if not stopped and received.count(b"\n\n") >= 3:
                stop = httpx.post(
                    f"{server.base_url}/v1/generations/{run_id}/stop",
                    headers={"Authorization": f"Bearer {tenant.secret}"},
                )
                assert stop.status_code == 200
                stopped = True
    return run_id, received


@pytest.mark.parametrize(
    "kind", ["scripted", "tool-call", "upstream", "upstream-with-pings", "stopped", "cancelled"]
)
def test_a_replay_is_the_stream_the_client_received(
    mortar_server, tenant, upstream_models: MockPair, slow_model, kind
) -> None:
    if kind == "stopped":
        run_id, received = stream_then_stop(
            mortar_server,
            tenant,
            {
                "model": slow_model,
                "messages": [{"role": "user", "content": "a " * 50}],
                "stream_options": {"include_usage": True},
            },
        )
        assert wait_for_run(run_id).status == "stopped"
        assert received.endswith(b"data: [DONE]\n\n")
        assert b'"finish_reason":"' not in received
    elif kind == "cancelled":
        received = b""
        with stream_completion(
            mortar_server,
            tenant.secret,
            {"model": slow_model, "messages": [{"role": "user", "content": "a " * 50}]},
            timeout=30,
        ) as response:
            run_id = response.headers["X-Mortar-Run-Id"]
            for raw in response.iter_raw():
                received += raw
                if received.count(b"\n\n") >= 3:
                    break
        run = wait_for_run(run_id)
        assert run.status == "cancelled"
        received = stored_bytes(run)  # what was sent before the client hung up
        assert received.startswith(b"data: ")
    else:
        body = {
            "scripted": {
                "messages": [{"role": "user", "content": "Tell me a story."}],
                "stream_options": {"include_usage": True},
            },
            "tool-call": {
                "messages": [{"role": "user", "content": "Weather?"}],
                "tools": [WEATHER_TOOL],
            },
            "upstream": {
                "model": "mock-one",
                "messages": [{"role": "user", "content": "[mock chunks=8 cached=3]"}],
                "stream_options": {"include_usage": True},
            },
            "upstream-with-pings": {
                "model": "mock-patient",
                "messages": [{"role": "user", "content": "[mock chunks=2 delay_ms=1500]"}],
            },
        }[kind]
        run_id, received = stream(mortar_server, tenant, body)
        wait_for_run(run_id)

    replayed = replay(mortar_server, tenant.secret, run_id)
    assert replayed.status_code == 200
    assert replayed.headers["X-Mortar-Run-Id"] == run_id
    assert replayed.headers["content-type"].startswith("text/event-stream")
    assert without_ids(replayed.content) == received
    ids = [int(i) for i in ID_LINE.findall(replayed.content)]
    assert ids == list(range(received.count(b"\n\n")))


def test_resume_from_the_middle_with_last_event_id_or_from(mortar_server, tenant) -> None:
    run_id, received = stream(
        mortar_server, tenant, {"messages": [{"role": "user", "content": "one two three " * 5}]}
    )
    wait_for_run(run_id)
    events = [event + b"\n\n" for event in received.split(b"\n\n") if event]
    whole = replay(mortar_server, tenant.secret, run_id).content

    by_header = replay(mortar_server, tenant.secret, run_id, headers={"Last-Event-ID": "3"})
    assert without_ids(by_header.content) == b"".join(events[4:])
    assert ID_LINE.findall(by_header.content)[0] == b"4"

    by_query = replay(mortar_server, tenant.secret, run_id, **{"from": "4"})
    assert by_query.content == by_header.content
    assert whole.endswith(by_query.content)


def test_pace_original_keeps_the_recorded_gaps(mortar_server, tenant, slow_model) -> None:
    run_id, _ = stream(
        mortar_server,
        tenant,
        {"model": slow_model, "messages": [{"role": "user", "content": "one two three four"}]},
    )
    offsets = list(wait_for_run(run_id).chunks.order_by("seq").values_list("offset_us", flat=True))
    recorded_seconds = (offsets[-1] - offsets[0]) / 1_000_000
    fast = replay(mortar_server, tenant.secret, run_id)
    started = time.monotonic()
    paced = replay(mortar_server, tenant.secret, run_id, pace="original")
    paced_seconds = time.monotonic() - started
    assert paced.content == fast.content
    # The slow deployment paused 200 ms between its two pieces; the paced replay waits as long
    # (a lower bound, which a busy machine cannot break; timers may fire a little early).
    assert recorded_seconds >= 0.19
    assert paced_seconds >= recorded_seconds - 0.01


@pytest.mark.postgres  # ages the stored chunk through its own Postgres connection
def test_without_pace_a_replay_keeps_no_gap(mortar_server, tenant) -> None:
    run_id, received = stream(
        mortar_server, tenant, {"messages": [{"role": "user", "content": "one two three"}]}
    )
    wait_for_run(run_id)
    # As if the model had paused an hour before its last chunk.
    committed(
        "UPDATE telemetry_runchunk SET offset_us = offset_us + 3600000000"
        " WHERE run_id = %s AND seq = (SELECT max(seq) FROM telemetry_runchunk"
        " WHERE run_id = %s)",
        (run_id, run_id),
    )
    # Answered whole, within the client's timeout: the recorded hour is not waited out.
    replayed = replay(mortar_server, tenant.secret, run_id)
    assert replayed.status_code == 200
    assert without_ids(replayed.content) == received


def test_a_follower_gets_an_in_flight_run_live_until_it_ends(
    mortar_server, tenant, slow_model
) -> None:
    body = {"model": slow_model, "messages": [{"role": "user", "content": "w " * 24}]}
    original: list[bytes] = []
    run_ids: list[str] = []
    first_chunks = threading.Event()

    def client() -> None:
        with stream_completion(mortar_server, tenant.secret, body, timeout=30) as response:
            run_ids.append(response.headers["X-Mortar-Run-Id"])
            for raw in response.iter_raw():
                original.append(raw)
                if b"".join(original).count(b"\n\n") >= 3:
                    first_chunks.set()

    thread = threading.Thread(target=client)
    thread.start()
    assert first_chunks.wait(10)
    followed = replay(mortar_server, tenant.secret, run_ids[0])  # attaches mid-run
    thread.join(30)
    assert b"".join(original).endswith(b"data: [DONE]\n\n")
    assert without_ids(followed.content) == b"".join(original)


def test_a_run_of_another_organization_is_gone(mortar_server, tenant, other_tenant) -> None:
    run_id, _ = stream(mortar_server, tenant, {"messages": [{"role": "user", "content": "x"}]})
    wait_for_run(run_id)
    response = replay(mortar_server, other_tenant.secret, run_id)
    assert response.status_code == 410
    assert response.json() == {
        "error": f"Run {run_id} is gone: unknown, expired, or not replayable.",
        "code": "run_gone",
    }


def test_an_unknown_run_is_gone(mortar_server, tenant) -> None:
    response = replay(mortar_server, tenant.secret, "chatcmpl-000000000000000000000000")
    assert (response.status_code, response.json()["code"]) == (410, "run_gone")


@pytest.mark.postgres  # it ages the run through a connection of its own, with psycopg
def test_an_expired_run_is_gone(mortar_server, tenant) -> None:
    run_id, _ = stream(mortar_server, tenant, {"messages": [{"role": "user", "content": "x"}]})
    wait_for_run(run_id)
    committed(
        "UPDATE telemetry_run SET accepted_at = accepted_at - interval '31 days' WHERE id = %s",
        (run_id,),
    )
    assert replay(mortar_server, tenant.secret, run_id).status_code == 410


def test_a_metadata_only_organization_keeps_no_content_and_cannot_replay(
    mortar_server, tmp_path
) -> None:
    config = tmp_path / "private.yaml"
    config.write_text("organizations:\n  - name: private-co\n    retention: metadata\n")
    manage("applyconfig", str(config))
    secret = manage("createkey", "private-co").strip()
    private = Tenant(organization=None, key=None, secret=secret)  # type: ignore[arg-type]
    run_id, received = stream(
        mortar_server, private, {"messages": [{"role": "user", "content": "secret stuff"}]}
    )
    run = wait_for_run(run_id)
    assert run.status == "completed"
    assert run.request_body is None
    assert run.chunks.count() == 0
    assert run.chunk_count == received.count(b"\n\n")
    assert replay(mortar_server, secret, run_id).status_code == 410


def test_a_json_run_is_replayed_as_its_body(mortar_server, tenant) -> None:
    response = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        content=orjson.dumps({"messages": [{"role": "user", "content": "x"}], "stream": False}),
        headers={"Authorization": f"Bearer {tenant.secret}"},
    )
    wait_for_run(response.headers["X-Mortar-Run-Id"])
    replayed = replay(mortar_server, tenant.secret, response.headers["X-Mortar-Run-Id"])
    assert replayed.content == response.content
    assert replayed.headers["content-type"] == "application/json"


def test_replay_needs_a_key(mortar_server) -> None:
    response = httpx.get(f"{mortar_server.base_url}/v1/chat/completions/runs/chatcmpl-x")
    assert response.status_code == 401
    assert response.json() == {
        "error": "No API key was presented. Send `Authorization: Bearer <key>` or `x-api-key`.",
        "code": "missing_key",
    }
