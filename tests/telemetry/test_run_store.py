"""Every run is stored with every chunk exactly as the client received it."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess, stream_completion

pytestmark = pytest.mark.django_db


def _post(server: ServerProcess, tenant: Tenant, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {tenant.secret}", **headers},
        timeout=10,
    )


def test_the_bytes_a_streaming_client_received_are_the_stored_chunks(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    body = {
        "messages": [{"role": "user", "content": "Tell me about audit trails, in detail."}],
        "stream_options": {"include_usage": True},
    }
    received = b""
    with stream_completion(mortar_server, tenant.secret, body, timeout=10) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        for raw in response.iter_raw():
            received += raw
        run_id = response.headers["X-Mortar-Run-Id"]

    run = wait_for_run(run_id)
    assert received.endswith(b"data: [DONE]\n\n")
    assert stored_bytes(run) == received
    assert run.chunk_count == received.count(b"\n\n") == run.chunks.count()
    offsets = list(run.chunks.order_by("seq").values_list("offset_us", flat=True))
    assert offsets == sorted(offsets)
    assert run.first_token_at is not None and run.finished_at >= run.first_token_at
    assert run.finished_at >= run.accepted_at


def test_a_json_reply_is_stored_as_one_chunk(mortar_server: ServerProcess, tenant: Tenant) -> None:
    response = _post(
        mortar_server, tenant, {"messages": [{"role": "user", "content": "Hi"}], "stream": False}
    )
    assert response.status_code == 200
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert stored_bytes(run) == response.content
    assert run.chunk_count == 1
    assert run.http_status == 200


def test_the_run_records_who_where_and_the_body_as_received(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    raw = b'{"messages":[{"role":"user","content":"Hi there"}],  "stream":false, "user":"u-42"}'
    response = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        content=raw,
        headers={
            "Authorization": f"Bearer {tenant.secret}",
            "X-Request-Id": "my-trace-7",
            "X-Mortar-End-User-Id": "alice@example.com",
        },
    )
    assert response.status_code == 200
    assert response.headers["X-Request-Id"] == "my-trace-7"
    assert response.headers["X-Mortar-Session"] == "u-42"
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert bytes(run.request_body) == raw
    assert run.request_bytes == len(raw)
    assert run.request_id == "my-trace-7"
    assert run.session == "u-42"
    assert run.end_user == "alice@example.com"
    assert run.model == "Qwen/Qwen2.5-7B-Instruct"
    assert run.max_tokens == 1024
    assert run.api_key_id == tenant.key.id


def test_a_client_that_disconnects_mid_stream_is_recorded_as_cancelled(
    mortar_server: ServerProcess, tenant: Tenant, slow_model: str
) -> None:
    body = {"model": slow_model, "messages": [{"role": "user", "content": "word " * 60}]}
    received = b""
    with stream_completion(mortar_server, tenant.secret, body, timeout=10) as response:
        run_id = response.headers["X-Mortar-Run-Id"]
        for raw in response.iter_raw():
            received += raw
            if received.count(b"\n\n") >= 2:  # the role chunk and one piece, then hang up
                break

    run = wait_for_run(run_id)
    assert run.status == "cancelled"
    assert run.error_code == "client_disconnected"
    assert run.finished_at is not None
    stored = stored_bytes(run)
    assert stored.startswith(received)
    assert b"[DONE]" not in stored
    assert run.chunk_count < 20  # the generation stopped, it did not run on to the end


def test_a_slow_deployment_paces_its_pieces(
    mortar_server: ServerProcess, tenant: Tenant, slow_model: str
) -> None:
    response = _post(
        mortar_server,
        tenant,
        {"model": slow_model, "messages": [{"role": "user", "content": "one two three four five"}]},
    )
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    offsets = list(run.chunks.order_by("seq").values_list("offset_us", flat=True))
    pieces = response.text.count('"content"')
    assert pieces == 3  # "You said: one", " two three four", " five"
    # Between the first and the last piece the model paused 200 ms each time.
    # (uvloop's timers have millisecond granularity and may fire up to ~1 ms early.)
    assert offsets[pieces] - offsets[1] >= (200_000 - 2_000) * (pieces - 1)
