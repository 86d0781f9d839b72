"""The production topology, natively: `make serve WORKERS=2` (two uvicorn processes on one port),
`make worker` and `make beat` on Postgres and Redis. A request is served, stopped from the
other worker, and replayed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.conftest import Tenant, _server_env, stored_bytes, wait_for_run
from tests.deploy.test_graceful_shutdown import SdkStream, words
from tests.support.servers import ROOT, ServerProcess, start_mortar
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.postgres, pytest.mark.redis]

ID_LINE = re.compile(rb"^id: (\d+)\n", re.MULTILINE)
VAR_DIR = Path(_server_env()["MORTAR_VAR_DIR"])
CELERY = str(Path(sys.executable).with_name("celery"))


def celery(arguments: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """A Celery process as the Makefile starts it, on the test run's database and Redis."""
    return subprocess.Popen(
        [CELERY, "-A", "config", *arguments],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **_server_env()},
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    """Two gateway workers, a Celery worker and beat; yields the gateway and the worker's log."""
    server = start_mortar(
        _server_env(), log_dir=tmp_path, server="serve", options=["--workers", "2"]
    )
    worker_log = tmp_path / "celery-worker.log"
    worker = celery(["worker", "--loglevel", "INFO"], worker_log)
    beat = celery(
        ["beat", "--loglevel", "INFO", "--schedule", str(tmp_path / "celerybeat-schedule")],
        tmp_path / "celery-beat.log",
    )
    try:
        yield server, worker_log
    finally:
        for process in (worker, beat):
            process.terminate()
        for process in (worker, beat):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        server.stop()


def worker_processes(supervisor: int) -> list[int]:
    """The uvicorn workers the supervisor spawned (not multiprocessing's resource tracker)."""
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return [
        int(child)
        for child in children
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


def completion(client: httpx.Client, tenant: Tenant) -> str:
    """A short non-streaming completion on this connection; return its run id."""
    response = client.post(
        "/v1/chat/completions",
        content=orjson.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": False}),
        headers={"Authorization": f"Bearer {tenant.secret}"},
    )
    assert response.status_code == 200, response.text
    return response.json()["id"]


def worker_of(run_id: str) -> str:
    """The lease of the gateway worker process that served the run."""
    from telemetry.models import Run

    worker = wait_until(
        lambda: Run.objects.filter(pk=run_id).values_list("worker", flat=True).first(),
        message=f"run {run_id} was not stored",
    )
    return worker


def connection_on_another_worker(
    server: ServerProcess, tenant: Tenant, worker: str
) -> httpx.Client:
    """A kept-alive connection accepted by a gateway worker other than `worker`.

    Both workers accept from one socket, so which one gets a connection is the kernel's choice:
    open connections until one is served by the other worker (a run names its worker)."""
    for _ in range(50):
        client = httpx.Client(base_url=server.base_url, timeout=30)
        if worker_of(completion(client, tenant)) != worker:
            return client
        client.close()
    raise AssertionError("50 connections were all accepted by one worker")


def test_two_workers_serve_stop_each_other_s_generations_and_replay(
    topology, tenant, slow_model
) -> None:
    from telemetry.models import Run

    server, worker_log = topology
    # Both gateway processes serve: their runs name two leases.
    seen: set[str] = set()
    for _ in range(50):
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            seen.add(worker_of(completion(client, tenant)))
        if len(seen) == 2:
            break
    assert len(seen) == 2, "one worker served every connection"
    # Each worker process logs what it queues for the run writer in files of its own
    # (docs/reliability.md): two processes, two sets of segments, none shared.
    workers = worker_processes(server.process.pid)
    assert len(workers) == 2
    for pid in workers:
        wait_until(
            lambda pid=pid: list((VAR_DIR / "chunklog").glob(f"log-{pid}-*.seg")),
            message=f"worker {pid} has no crash log of its own",
        )

    prompt = words(120)  # ~8 s of stream: stopped long before its end
    stream = SdkStream(server, tenant, slow_model, prompt)
    stream.wait_for_content()
    streaming_on = worker_of(stream.run_id)
    other = connection_on_another_worker(server, tenant, streaming_on)
    try:
        response = other.post(
            f"/v1/generations/{stream.run_id}/stop",
            headers={"Authorization": f"Bearer {tenant.secret}"},
        )
    finally:
        other.close()
    assert response.status_code == 200, response.text
    assert response.json() == {"stopped": True, "id": stream.run_id}
    stream.join()
    assert stream.error is None, stream.error
    assert stream.finish_reasons() == []  # a stopped stream has no finish chunk
    assert len(stream.content()) < len(f"You said: {prompt}")

    run = wait_for_run(stream.run_id)
    assert run.status == Run.Status.STOPPED
    assert run.worker == streaming_on
    assert run.error_code == ""  # stopped by a person, not by a shutdown

    replay = httpx.get(
        f"{server.base_url}/v1/chat/completions/runs/{run.id}",
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )
    assert replay.status_code == 200
    # The stream the client saw, each event with its number (`id: n`) for Last-Event-ID.
    assert ID_LINE.sub(b"", replay.content) == stored_bytes(run)
    assert ID_LINE.findall(replay.content) == [str(n).encode() for n in range(run.chunk_count)]
    assert replay.content.endswith(b"data: [DONE]\n\n")

    # The Celery worker runs what beat schedules (the orphaned-run sweep, every 10 s).
    wait_until(
        lambda: re.search(
            r"Task telemetry\.tasks\.interrupt_orphaned_runs\[[^]]+\] succeeded",
            worker_log.read_text(errors="replace"),
        ),
        timeout=45,
        message="the Celery worker ran no task beat scheduled",
    )

    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) == 0, server.log()
