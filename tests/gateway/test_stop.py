"""POST /v1/generations/{id}/stop across worker processes, and clients that hang up."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable

import httpx
import orjson
import pytest

from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess, stream_completion
from tests.support.telemetry import Subscriber
from tests.support.upstreams import MockPair, mock_reset, mock_stats
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db


class StreamingClient:
    """Streams one completion on a thread, collecting its events as they arrive."""

    def __init__(
        self,
        server: ServerProcess,
        tenant: Tenant,
        body: dict,
        *,
        started: Callable[[list[bytes]], bool] = lambda events: len(events) >= 3,
    ) -> None:
        self.events: list[bytes] = []
        self.headers: dict[str, str] = {}
        self._is_started = started
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(server, tenant, body))
        self._thread.start()

    def _run(self, server: ServerProcess, tenant: Tenant, body: dict) -> None:
        with stream_completion(server, tenant.secret, body, timeout=60) as response:
            self.headers = dict(response.headers)
            buffer = b""
            for raw in response.iter_raw():
                buffer += raw
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    self.events.append(event + b"\n\n")
                    if self._is_started(self.events):
                        self._started.set()

    def wait_started(self) -> str:
        assert self._started.wait(15), "the stream did not start"
        return self.headers["x-mortar-run-id"]

    def join(self) -> bytes:
        self._thread.join(60)
        assert not self._thread.is_alive()
        return b"".join(self.events)


def stop(server: ServerProcess, secret: str, run_id: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/generations/{run_id}/stop",
        headers={"Authorization": f"Bearer {secret}"},
    )


LONG_UPSTREAM = {
    "model": "mock-patient",
    "messages": [{"role": "user", "content": "[mock chunks=200 delay_ms=100]"}],
    "stream_options": {"include_usage": True},
}


# Two pieces at once, then a silence far longer than any stop takes (the deployment waits
# 10 s between chunks): a stream that ends before the third piece was ended by the stop.
SILENT_UPSTREAM = {
    "model": "mock-patient",
    "messages": [{"role": "user", "content": "[mock chunks=3 delay_ms=8000]"}],
    "stream_options": {"include_usage": True},
}


@pytest.mark.redis
def test_a_stop_sent_to_another_process_ends_the_stream_at_once(
    mortar_server, second_server, tenant, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    client = StreamingClient(
        mortar_server,
        tenant,
        SILENT_UPSTREAM,
        started=lambda events: any(b'"content":"tok0"' in event for event in events),
    )
    run_id = client.wait_started()

    # A running worker: B has served a request before (its first one pays for imports).
    assert stop(second_server, tenant.secret, "chatcmpl-warm-up").status_code == 404
    response = stop(second_server, tenant.secret, run_id)
    received = client.join()

    assert response.status_code == 200
    assert response.json() == {"stopped": True, "id": run_id}
    # It ended while the model was silent, without waiting for the model's next piece.
    assert b"tok1" not in received
    events = client.events
    assert events[-1] == b"data: [DONE]\n\n"
    assert json.loads(events[-2][6:])["choices"] == []  # the usage chunk still comes
    assert not any(b'"finish_reason":"' in event for event in events)  # no finish chunk

    run = wait_for_run(run_id)
    assert run.status == "stopped"
    assert stored_bytes(run) == received
    wait_until(
        lambda: mock_stats(upstream_models.a)["in_flight"] == 0,
        message="the model server still streams",
    )
    stats = mock_stats(upstream_models.a)
    assert (stats["cancelled"], stats["in_flight"]) == (1, 0)  # the model server stopped
    assert stop(second_server, tenant.secret, run_id).status_code == 404  # not twice


@pytest.mark.redis
def test_another_organizations_stop_is_a_404_and_the_stream_goes_on(
    mortar_server, second_server, tenant, other_tenant, slow_model
) -> None:
    client = StreamingClient(
        mortar_server,
        tenant,
        {"model": slow_model, "messages": [{"role": "user", "content": "one two three " * 3}]},
    )
    run_id = client.wait_started()
    response = stop(second_server, other_tenant.secret, run_id)
    received = client.join()
    assert response.status_code == 404
    assert response.json() == {"stopped": False, "id": run_id}
    assert b'"finish_reason":"stop"' in received and received.endswith(b"data: [DONE]\n\n")
    assert wait_for_run(run_id).status == "completed"


@pytest.mark.parametrize("run_id", ["chatcmpl-000000000000000000000000", "nonsense"])
def test_stopping_an_unknown_generation_is_a_404(mortar_server, tenant, run_id) -> None:
    response = stop(mortar_server, tenant.secret, run_id)
    assert (response.status_code, response.json()) == (404, {"stopped": False, "id": run_id})


def test_stopping_a_finished_generation_is_a_404(mortar_server, tenant) -> None:
    done = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        content=orjson.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": False}),
        headers={"Authorization": f"Bearer {tenant.secret}"},
    )
    assert stop(mortar_server, tenant.secret, done.json()["id"]).status_code == 404


@pytest.mark.redis
def test_a_stopped_json_request_returns_what_was_generated(
    mortar_server, second_server, tenant, slow_model
) -> None:
    from telemetry.models import Run

    result: dict = {}
    session = f"stop-me-{uuid.uuid4().hex}"
    # From the stream's start: this session's events only, none missed however early.
    events = Subscriber(mortar_server, tenant.secret, session=session, last_event_id="0-0")

    def call() -> None:
        response = httpx.post(
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "model": slow_model,
                    "stream": False,
                    "messages": [{"role": "user", "content": "a b c d e f " * 4}],
                }
            ),
            headers={
                "Authorization": f"Bearer {tenant.secret}",
                "X-Request-Id": "stop-me",
                "X-Mortar-Session": session,
            },
            timeout=30,
        )
        result["response"] = response

    thread = threading.Thread(target=call)
    thread.start()
    first_token = events.first("generation.first_token")  # some of the reply is generated
    events.close()
    run_id = wait_until(
        lambda: Run.objects.filter(request_id="stop-me").values_list("id", flat=True).first()
    )
    assert run_id is not None
    assert first_token["runId"] == run_id
    assert stop(second_server, tenant.secret, run_id).status_code == 200
    thread.join(10)
    body = result["response"].json()
    assert body["choices"][0]["finish_reason"] == "stopped"
    content = body["choices"][0]["message"]["content"]
    assert content and ("You said: " + "a b c d e f " * 4).strip().startswith(content.strip())
    assert len(content) < len("You said: " + "a b c d e f " * 4) - 5
    assert wait_for_run(run_id).status == "stopped"


def test_a_client_that_hangs_up_cancels_the_model_servers_request(
    mortar_server, tenant, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    with stream_completion(mortar_server, tenant.secret, LONG_UPSTREAM, timeout=30) as response:
        run_id = response.headers["X-Mortar-Run-Id"]
        for _ in response.iter_raw():
            break  # hang up after the first bytes
    run = wait_for_run(run_id)
    assert (run.status, run.error_code) == ("cancelled", "client_disconnected")
    assert run.finished_at is not None
    wait_until(
        lambda: mock_stats(upstream_models.a)["cancelled"] >= 1,
        message="the model server's request was not cancelled",
    )
    assert mock_stats(upstream_models.a)["cancelled"] == 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_a_client_that_leaves_before_the_first_chunk_leaves_no_run_in_progress(
    mortar_server, tenant, upstream_models: MockPair, stream: bool
) -> None:
    from telemetry.models import Run

    request_id = f"leaves-early-{stream}"
    body = {
        "model": "mock-patient",
        "stream": stream,
        "messages": [{"role": "user", "content": "[mock first_delay_ms=1500]"}],
    }
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(body),
            headers={"Authorization": f"Bearer {tenant.secret}", "X-Request-Id": request_id},
            timeout=httpx.Timeout(5, read=0.4),
        )
    run = wait_until(
        lambda: Run.objects.filter(request_id=request_id).exclude(status="in_progress").first(),
        message=f"no finished run for {request_id}",
    )
    assert run is not None
    assert (run.status, run.error_code) == ("cancelled", "client_disconnected")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_clients_that_leave_at_any_moment_leave_no_run_in_progress(
    mortar_server, tenant, upstream_models: MockPair, stream: bool
) -> None:
    from telemetry.models import Run

    prefix = f"leaves-anywhere-{stream}-"
    body = orjson.dumps(
        {
            "model": "mock-patient",
            "stream": stream,
            "messages": [{"role": "user", "content": "[mock chunks=8 delay_ms=2]"}],
        }
    )
    # Hang up after 1 to 40 ms: before the model answers, mid-reply, while the run is closed.
    for step in range(40):
        try:
            with httpx.Client(timeout=httpx.Timeout(5, read=(step + 1) / 1000)) as client:
                client.post(
                    f"{mortar_server.base_url}/v1/chat/completions",
                    content=body,
                    headers={
                        "Authorization": f"Bearer {tenant.secret}",
                        "X-Request-Id": f"{prefix}{step}",
                    },
                ).read()
        except httpx.ReadTimeout:
            pass
    runs = Run.objects.filter(request_id__startswith=prefix)
    wait_until(
        lambda: not runs.filter(status="in_progress").exists() and runs.count() >= 20,
        timeout=15,
        message=lambda: f"runs still in progress: {list(runs.values_list('status', flat=True))}",
    )
    statuses = set(runs.values_list("status", flat=True))
    assert "in_progress" not in statuses
    assert statuses <= {"completed", "cancelled"}
    assert runs.count() >= 20  # most hang-ups came after the request was accepted


def test_a_stop_sent_to_the_same_process_ends_the_stream(
    mortar_server, tenant, other_tenant, slow_model
) -> None:
    # One worker (the embedded default has no other): the stop is decided where it runs.
    client = StreamingClient(
        mortar_server,
        tenant,
        {"model": slow_model, "messages": [{"role": "user", "content": "one two three " * 4}]},
    )
    run_id = client.wait_started()
    refused = stop(mortar_server, other_tenant.secret, run_id)
    response = stop(mortar_server, tenant.secret, run_id)
    received = client.join()

    assert (refused.status_code, refused.json()) == (404, {"stopped": False, "id": run_id})
    assert (response.status_code, response.json()) == (200, {"stopped": True, "id": run_id})
    assert received.endswith(b"data: [DONE]\n\n")
    assert b'"finish_reason":"stop"' not in received
    run = wait_for_run(run_id)
    assert run.status == "stopped"
    assert stored_bytes(run) == received
    assert stop(mortar_server, tenant.secret, run_id).status_code == 404  # not twice
