"""Crash accounting on real processes: kill -9 a worker mid-stream, and its
runs are closed as `interrupted` within its lease by a live worker or the Celery beat task;
replaying one ends; Stop answers as for a finished run; no run stays in progress.

The workers here hold leases of `LEASE` seconds (`MORTAR_WORKER_LEASE_SECONDS`), renewed every
third of it; the session's other servers keep the default (30 s), so they take no part in time.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from telemetry.models import Run, RunChunk, WorkerLease
from telemetry.services.interruptions import WORKER_INTERRUPTED, runs_interrupt_orphaned
from telemetry.tasks import interrupt_orphaned_runs
from tests.conftest import Tenant, _server_env, wait_for_run
from tests.support.servers import ServerProcess, start_mortar, stream_completion
from tests.support.telemetry import Subscriber
from tests.support.upstreams import MockPair
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db

LEASE = 2
# A crashed worker's runs are closed within its lease plus one renewal interval (a third of
# it); the rest is slack for a loaded machine.
CLOSED_WITHIN = LEASE + LEASE / 3 + 3
STREAMS = 6


def lease_env() -> dict[str, str]:
    return {**_server_env(), "MORTAR_WORKER_LEASE_SECONDS": str(LEASE)}


@pytest.fixture
def servers() -> Iterator[list[ServerProcess]]:
    """The servers a test starts, stopped (or found dead) at its end."""
    started: list[ServerProcess] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def survivor(
    upstream_models: MockPair, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A live worker with a short lease: it sweeps for dead workers every third of it."""
    server = start_mortar(lease_env(), log_dir=tmp_path_factory.mktemp("survivor"))
    yield server
    server.stop()


def start(servers: list[ServerProcess], log_dir: Path) -> ServerProcess:
    log_dir.mkdir(exist_ok=True)
    server = start_mortar(lease_env(), log_dir=log_dir)
    servers.append(server)
    return server


def slow_body(chunks: int = 300, delay_ms: int = 50) -> dict[str, Any]:
    """A stream of the mock model that lasts `chunks` times `delay_ms`."""
    return {
        "model": "mock-patient",
        "stream": True,
        "messages": [{"role": "user", "content": f"[mock chunks={chunks} delay_ms={delay_ms}] go"}],
    }


class Stream:
    """One streamed completion on a thread, its events counted as they arrive."""

    def __init__(self, server: ServerProcess, secret: str, body: dict[str, Any]) -> None:
        self.events = 0
        self.run_id = ""
        self.ended_cleanly = False
        self._thread = threading.Thread(target=self._read, args=(server, secret, body))
        self._thread.start()

    def _read(self, server: ServerProcess, secret: str, body: dict[str, Any]) -> None:
        try:
            with stream_completion(server, secret, body, timeout=60) as response:
                self.run_id = response.headers["X-Mortar-Run-Id"]
                buffer = b""
                for raw in response.iter_raw():
                    buffer += raw
                    while b"\n\n" in buffer:
                        _, buffer = buffer.split(b"\n\n", 1)
                        self.events += 1
                self.ended_cleanly = True
        except httpx.HTTPError:
            pass  # its worker was killed

    def join(self, timeout: float = 30) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the stream did not end"


class Follower:
    """A replay of a run, read on a thread until it ends."""

    def __init__(self, server: ServerProcess, secret: str, run_id: str) -> None:
        self.events = 0
        self.status = 0
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._read, args=(server, secret, run_id))
        self._thread.start()

    def _read(self, server: ServerProcess, secret: str, run_id: str) -> None:
        with httpx.stream(
            "GET",
            f"{server.base_url}/v1/chat/completions/runs/{run_id}",
            headers={"Authorization": f"Bearer {secret}"},
            timeout=60,
        ) as response:
            self.status = response.status_code
            body = b""
            for raw in response.iter_raw():
                body += raw
                self.events = body.count(b"\n\n")
        self.ended_at = time.monotonic()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the replay never ended"


def start_streams(server: ServerProcess, secret: str, count: int) -> list[Stream]:
    """`count` slow streams, each past its first events and stored as in progress."""
    streams = [Stream(server, secret, slow_body()) for _ in range(count)]
    wait_until(
        lambda: all(s.events >= 5 for s in streams), timeout=20, message="streams did not start"
    )
    ids = [s.run_id for s in streams]
    wait_until(
        lambda: (
            RunChunk.objects.filter(run_id__in=ids).values("run_id").distinct().count() == count
        ),
        message="runs and chunks were not stored",
    )
    return streams


def kill(server: ServerProcess) -> float:
    """kill -9: nothing is flushed, closed or released."""
    server.process.kill()
    server.process.wait()
    return time.monotonic()


def stop(server: ServerProcess, secret: str, run_id: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/generations/{run_id}/stop",
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    )


def on_own_connection(fn: Any) -> Any:
    """Call `fn` on a connection of its own, committed, as a Celery worker would."""

    def call() -> Any:
        try:
            return fn()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


def test_the_beat_task_interrupts_a_killed_worker_s_runs_once_however_many_run_it(
    upstream_models: MockPair,
    tenant: Tenant,
    servers: list[ServerProcess],
    tmp_path: Path,
) -> None:
    victim = start(servers, tmp_path / "victim")
    streams = start_streams(victim, tenant.secret, STREAMS)
    ids = [s.run_id for s in streams]
    [worker] = set(Run.objects.filter(id__in=ids).values_list("worker", flat=True))

    kill(victim)
    lease = WorkerLease.objects.filter(id=worker)
    wait_until(
        lambda: lease.filter(expires_at__lt=Now()).exists(),
        timeout=LEASE + 2,
        message="the lease did not expire",
    )

    # The beat task and two more sweeps at once, each on its own connection, as separate
    # Celery workers would. (No live worker of this module is up yet: the survivor starts with
    # the next test; the session's servers sweep every 10 s.)
    sweeps = [interrupt_orphaned_runs, runs_interrupt_orphaned, runs_interrupt_orphaned]
    with ThreadPoolExecutor(3) as pool:
        _, *swept = pool.map(on_own_connection, sweeps)

    runs = Run.objects.filter(id__in=ids)
    assert sorted(runs.values_list("status", flat=True)) == [Run.Status.INTERRUPTED] * STREAMS
    # Each run was closed once: never by two sweeps.
    ours = [run.id for closed in swept for run in closed if run.id in ids]
    assert len(ours) == len(set(ours))
    assert not [run for run in on_own_connection(runs_interrupt_orphaned) if run.id in ids]
    for s in streams:
        s.join()


def test_a_killed_worker_s_runs_are_interrupted_by_a_live_worker_within_the_lease(
    survivor: ServerProcess,
    tenant: Tenant,
    servers: list[ServerProcess],
    tmp_path: Path,
) -> None:
    victim = start(servers, tmp_path / "victim")
    subscriber = Subscriber(survivor, tenant.secret)
    # The survivor serves a stream of its own, longer than its lease, all through the crash.
    own = Stream(survivor, tenant.secret, slow_body(chunks=30, delay_ms=100))
    streams = start_streams(victim, tenant.secret, STREAMS)
    ids = [s.run_id for s in streams]
    follower = Follower(survivor, tenant.secret, ids[0])  # follows a run in flight
    wait_until(lambda: follower.events >= 5, message="the replay did not start")
    [worker] = set(Run.objects.filter(id__in=ids).values_list("worker", flat=True))
    assert worker  # the runs name the victim's lease
    assert WorkerLease.objects.filter(id=worker).exists()

    killed_at = kill(victim)
    for s in streams:
        s.join()

    runs = Run.objects.filter(id__in=ids)
    wait_until(
        lambda: not runs.filter(status=Run.Status.IN_PROGRESS).exists(),
        timeout=CLOSED_WITHIN,
        message=lambda: f"runs still in progress: {list(runs.values_list('id', 'status'))}",
    )
    closed_after = time.monotonic() - killed_at
    assert closed_after <= CLOSED_WITHIN

    received = {s.run_id: s.events for s in streams}
    for run in runs:
        assert run.status == Run.Status.INTERRUPTED
        assert run.error_code == WORKER_INTERRUPTED
        assert run.worker == worker
        assert run.finished_at is not None and run.finished_at >= run.accepted_at
        stored = RunChunk.objects.filter(run=run).count()
        assert run.chunk_count == stored  # what was stored, kept
        assert 1 <= stored <= received[run.id]
        assert not any(s.ended_cleanly for s in streams if s.run_id == run.id)

    # Telemetry subscribers see the runs end. (Across workers on Redis; in embedded mode a
    # worker's events reach only its own subscribers, and another may have closed them.)
    if settings.REDIS_URL:
        subscriber.wait_for(
            lambda events: (
                {
                    e["runId"]
                    for e in events
                    if e["type"] == "generation.failed" and e["code"] == WORKER_INTERRUPTED
                }
                == set(ids)
            )
        )
    subscriber.close()

    # The replay that followed the run ends, with every stored event.
    follower.join(timeout=5)
    assert follower.status == 200
    assert follower.events == Run.objects.get(id=ids[0]).chunk_count
    # A replay asked for now is the stored events, and ends.
    replayed = httpx.get(
        f"{survivor.base_url}/v1/chat/completions/runs/{ids[1]}",
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=10,
    )
    assert replayed.status_code == 200
    assert replayed.content.count(b"\n\n") == Run.objects.get(id=ids[1]).chunk_count

    # Stop answers as for any finished run: 404, not stopped.
    finished = wait_for_run(own.run_id, timeout=30)
    assert stop(survivor, tenant.secret, ids[1]).json() == {"stopped": False, "id": ids[1]}
    assert stop(survivor, tenant.secret, ids[1]).status_code == 404
    assert stop(survivor, tenant.secret, finished.id).status_code == 404

    # The live worker's own stream, longer than its lease, was never interrupted.
    own.join()
    assert own.ended_cleanly
    assert (finished.status, finished.error_code) == (Run.Status.COMPLETED, "")
    assert not Run.objects.filter(worker=worker, status=Run.Status.IN_PROGRESS).exists()


def test_a_worker_cut_off_past_its_lease_reopens_its_runs_and_their_outcome_wins(
    survivor: ServerProcess, tenant: Tenant
) -> None:
    streaming = Stream(survivor, tenant.secret, slow_body(chunks=30, delay_ms=100))
    wait_until(lambda: streaming.events >= 3, message="the stream did not start")
    run_id = streaming.run_id
    run = wait_until(lambda: Run.objects.filter(id=run_id).first(), message="run not stored")

    def expire_and_sweep() -> list[str]:
        # As if the worker had been cut off from the database for longer than its lease.
        with transaction.atomic():
            WorkerLease.objects.filter(id=run.worker).update(
                expires_at=Now() - timedelta(seconds=1)
            )
            return [run.id for run in runs_interrupt_orphaned()]

    assert run_id in on_own_connection(expire_and_sweep)
    assert Run.objects.get(id=run_id).status == Run.Status.INTERRUPTED

    # Its next renewal finds the lease expired: the run is in progress again, then completes.
    wait_until(
        lambda: Run.objects.filter(id=run_id, status=Run.Status.IN_PROGRESS).exists(),
        timeout=LEASE,
        message="the run was not reopened",
    )
    streaming.join()
    assert streaming.ended_cleanly
    completed = wait_for_run(run_id, timeout=10)
    assert (completed.status, completed.error_code, completed.finished_at is not None) == (
        Run.Status.COMPLETED,
        "",
        True,
    )


def test_a_run_accepted_by_a_worker_knows_its_lease(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    response = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        content=orjson.dumps(
            {"stream": False, "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
        ),
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    lease = WorkerLease.objects.get(id=run.worker)
    assert lease.pid == mortar_server.process.pid
