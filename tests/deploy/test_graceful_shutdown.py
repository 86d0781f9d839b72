"""SIGTERM to a serving worker: streams in flight finish within `MORTAR_SHUTDOWN_GRACE_SECONDS`,
the rest are stopped and recorded, the run writer is flushed and the process exits 0."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Tenant, _server_env
from tests.support.servers import ServerProcess, start_mortar
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db


def words(count: int) -> str:
    return " ".join(f"w{i}" for i in range(count))


def content_of(chunk: Any) -> str:
    # Mortar's finish chunk has no `delta` (docs/api/compatibility.md, "The finish chunk").
    delta = chunk.choices[0].delta if chunk.choices else None
    return (delta.content or "") if delta is not None else ""


class SdkStream:
    """One streamed completion read with the OpenAI SDK on a thread, chunk by chunk."""

    def __init__(self, server: ServerProcess, tenant: Tenant, model: str, prompt: str) -> None:
        self.chunks: list[Any] = []
        self.error: BaseException | None = None
        self.sigterm_at_chunk: int | None = None
        self._first_content = threading.Event()
        client = openai.OpenAI(
            base_url=f"{server.base_url}/v1", api_key=tenant.secret, max_retries=0, timeout=60
        )
        self._thread = threading.Thread(target=self._read, args=(client, model, prompt))
        self._thread.start()

    def _read(self, client: openai.OpenAI, model: str, prompt: str) -> None:
        try:
            for chunk in client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": prompt}],
                stream=True,
                stream_options={"include_usage": True},
            ):
                self.chunks.append(chunk)
                if content_of(chunk):
                    self._first_content.set()
        except BaseException as exc:  # the test asserts there was none
            self.error = exc
        finally:
            self._first_content.set()

    def wait_for_content(self) -> None:
        assert self._first_content.wait(30), "no content arrived"
        assert self.error is None, self.error

    def join(self) -> None:
        self._thread.join(60)
        assert not self._thread.is_alive(), "the stream never ended"

    @property
    def run_id(self) -> str:
        return self.chunks[0].id

    def content(self) -> str:
        return "".join(content_of(chunk) for chunk in self.chunks)

    def finish_reasons(self) -> list[str]:
        return [
            c.choices[0].finish_reason
            for c in self.chunks
            if c.choices
            if c.choices[0].finish_reason
        ]

    def usage(self) -> Any:
        with_usage = [c.usage for c in self.chunks if c.usage is not None]
        assert len(with_usage) == 1
        return with_usage[0]


def serve(tmp_path: Path, grace_seconds: float) -> ServerProcess:
    env = {**_server_env(), "MORTAR_SHUTDOWN_GRACE_SECONDS": str(grace_seconds)}
    return start_mortar(env, log_dir=tmp_path, server="serve")


def refuses_connections(server: ServerProcess) -> bool:
    try:
        httpx.get(f"{server.base_url}/healthz", timeout=1)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        # A connection that was still in the listen backlog when the socket closed is
        # reset rather than refused; either way the request was not served.
        return True
    return False


def test_a_stream_in_flight_at_sigterm_finishes_and_the_worker_exits_0(
    tmp_path, tenant, slow_model
) -> None:
    from telemetry.models import Run

    server = serve(tmp_path, grace_seconds=20)
    try:
        prompt = words(30)  # 11 pieces, 200 ms apart: ~2 s
        stream = SdkStream(server, tenant, slow_model, prompt)
        stream.wait_for_content()
        server.process.send_signal(signal.SIGTERM)
        # It stops accepting at once, while the stream goes on.
        wait_until(lambda: refuses_connections(server), timeout=5, message="still accepting")
        stream.join()
        assert server.process.wait(timeout=30) == 0, server.log()
    finally:
        server.stop()

    assert stream.error is None, stream.error
    assert stream.content() == f"You said: {prompt}"  # the whole reply
    assert stream.finish_reasons() == ["stop"]
    run = Run.objects.get(pk=stream.run_id)  # flushed before the process ended
    assert run.status == Run.Status.COMPLETED
    assert run.finish_reason == "stop"
    assert run.error_code == ""
    assert run.completion_tokens == stream.usage().completion_tokens
    assert run.chunk_count == len(stream.chunks) + 1  # and [DONE]


def test_a_stream_longer_than_the_grace_is_stopped_recorded_and_the_worker_exits_0(
    tmp_path, tenant, slow_model
) -> None:
    from telemetry.models import Run

    server = serve(tmp_path, grace_seconds=1)
    try:
        prompt = words(120)  # 41 pieces, 200 ms apart: ~8 s, far past the grace
        stream = SdkStream(server, tenant, slow_model, prompt)
        stream.wait_for_content()
        chunks_at_sigterm = len(stream.chunks)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.log()
        exited_after = time.monotonic() - signalled
        stream.join()
    finally:
        server.stop()

    assert exited_after < 6, f"the grace was not enforced: exited after {exited_after:.1f} s"
    assert "stopped 1 generation(s) in flight" in server.log()
    assert stream.error is None, stream.error  # the SDK read a stream that ended properly
    assert len(stream.chunks) - chunks_at_sigterm >= 3, "the stream did not go on in the grace"
    content = stream.content()
    assert f"You said: {prompt}".startswith(content)
    assert len(content) < len(f"You said: {prompt}")
    # A stopped stream sends no finish chunk; the usage chunk and [DONE] still follow.
    assert stream.finish_reasons() == []
    run = Run.objects.get(pk=stream.run_id)
    assert run.status == Run.Status.STOPPED  # never left in_progress
    assert run.error_code == "worker_shutdown"
    assert run.finish_reason == "stopped"
    assert run.finished_at is not None
    assert run.completion_tokens == stream.usage().completion_tokens
    assert run.chunk_count == len(stream.chunks) + 1  # and [DONE]


def test_a_json_request_longer_than_the_grace_returns_what_was_generated(
    tmp_path, tenant, slow_model
) -> None:
    from telemetry.models import Run

    server = serve(tmp_path, grace_seconds=1)
    client = openai.OpenAI(
        base_url=f"{server.base_url}/v1", api_key=tenant.secret, max_retries=0, timeout=60
    )
    prompt = words(120)
    request_id = f"shutdown-json-{time.monotonic_ns()}"
    answers: list[Any] = []
    thread = threading.Thread(
        target=lambda: answers.append(
            client.chat.completions.create(
                model=slow_model,
                messages=[{"role": "user", "content": prompt}],
                stream=False,
                extra_headers={"X-Request-Id": request_id},
            )
        )
    )
    try:
        thread.start()
        run_id = wait_until(
            lambda: Run.objects.filter(request_id=request_id).values_list("id", flat=True).first()
        )
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0, server.log()
        thread.join(30)
    finally:
        server.stop()

    [completion] = answers
    assert completion.id == run_id
    assert completion.choices[0].finish_reason == "stopped"
    content = completion.choices[0].message.content
    assert f"You said: {prompt}".startswith(content)
    assert len(content) < len(f"You said: {prompt}")
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.STOPPED
    assert run.error_code == "worker_shutdown"
    assert run.completion_tokens == completion.usage.completion_tokens


def new_connection(server: ServerProcess) -> str:
    """What a new connection gets now: `refused` (or reset before it was served), `503`, or
    `served` (any other answer); one that gets no answer within 1 s fails the test."""
    try:
        response = httpx.get(f"{server.base_url}/healthz", timeout=1)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        return "refused"
    if response.status_code == 503 and response.headers.get("connection") == "close":
        return "503"
    return "served"


@pytest.mark.redis
def test_with_two_workers_new_connections_are_refused_at_once_while_a_stream_finishes(
    tmp_path, tenant, slow_model
) -> None:
    from telemetry.models import Run

    env = {**_server_env(), "MORTAR_SHUTDOWN_GRACE_SECONDS": "20"}
    server = start_mortar(env, log_dir=tmp_path, server="serve", options=["--workers", "2"])
    try:
        # Both serving (the port answers as soon as one is): a worker still starting holds the
        # socket without accepting on it, and would hold a new connection until it is up.
        wait_until(
            lambda: server.log().count("Application startup complete") == 2,
            message="the second worker did not start",
        )
        prompt = words(30)  # 11 pieces, 200 ms apart: ~2 s
        stream = SdkStream(server, tenant, slow_model, prompt)
        stream.wait_for_content()
        chunks_at_sigterm = len(stream.chunks)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        outcome = wait_until(
            lambda: (got := new_connection(server)) != "served" and got,
            timeout=1,
            interval=0.02,
            message="a new connection was still served",
        )
        refused_after = time.monotonic() - signalled
        # From then on every new connection is turned away, while the stream goes on.
        for _ in range(5):
            assert new_connection(server) in {"refused", "503"}
        assert len(stream.chunks) < 14, "the stream was over before the test looked"
        stream.join()
        assert server.process.wait(timeout=30) == 0, server.log()
    finally:
        server.stop()

    assert outcome in {"refused", "503"}
    assert refused_after < 1.0, f"still served {refused_after:.2f} s after SIGTERM"
    assert stream.error is None, stream.error
    assert len(stream.chunks) - chunks_at_sigterm >= 3, "the stream did not go on after SIGTERM"
    assert stream.content() == f"You said: {prompt}"  # the whole reply
    assert stream.finish_reasons() == ["stop"]
    run = Run.objects.get(pk=stream.run_id)
    assert run.status == Run.Status.COMPLETED
    assert run.finish_reason == "stop"
