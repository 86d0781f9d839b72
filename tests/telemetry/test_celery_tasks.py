"""The retention and rollup tasks, run by a real Celery worker process over the Redis broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from accounts.models import Organization
from config.celery import app as celery_app
from telemetry.models import Run, RunChunk, UsageRollup
from telemetry.tasks import purge_expired_runs, rollup_usage
from tests.conftest import _server_env
from tests.support.servers import ROOT

pytestmark = pytest.mark.django_db

BODY = b'{"messages":[{"role":"user","content":"keep this secret"}]}'


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    queue: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass(frozen=True)
class Committed:
    """Rows committed for the worker to see (the test's own transaction is invisible to it)."""

    metadata_org: Organization
    expired: Run
    stripped: Run
    refused: Run
    full_org: Organization
    hour: datetime


def _run(org: Organization, *, at: datetime, chunks: int = 0, **fields: Any) -> Run:
    run = Run.objects.create(
        id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
        organization=org,
        accepted_at=at,
        request_body=BODY,
        **{"status": Run.Status.COMPLETED, "http_status": 200, **fields},
    )
    RunChunk.objects.bulk_create(
        RunChunk(run=run, seq=seq, offset_us=seq, data=b"data: reply\n\n") for seq in range(chunks)
    )
    return run


@pytest.fixture(scope="module")
def committed(django_db_setup: None, django_db_blocker: Any) -> Iterator[Committed]:
    tag = uuid.uuid4().hex[:10]
    now = timezone.now()
    # Whole minutes after an hour began, 29 to 89 minutes ago: inside the task's two hours.
    hour = (now - timedelta(minutes=30)).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    with django_db_blocker.unblock():
        metadata_org = Organization.objects.create(
            name=f"celery-metadata-{tag}", retention="metadata", retention_days=1
        )
        expired = _run(metadata_org, at=now - timedelta(days=2), chunks=3)
        stripped = _run(metadata_org, at=now - timedelta(hours=1), chunks=2, upstream_request=BODY)
        refused = _run(
            metadata_org,
            at=now - timedelta(hours=1),
            chunks=1,
            status=Run.Status.REFUSED,
            http_status=400,
        )
        full_org = Organization.objects.create(name=f"celery-full-{tag}")
        for minute, status, http_status in [(1, "completed", 200), (2, "failed", 502)]:
            _run(
                full_org,
                at=hour + timedelta(minutes=minute),
                status=status,
                http_status=http_status,
                first_token_at=hour + timedelta(minutes=minute, milliseconds=150),
                finished_at=hour + timedelta(minutes=minute, seconds=2),
                prompt_tokens=11,
                completion_tokens=5,
                cost=Decimal("0.000003"),
            )
    yield Committed(metadata_org, expired, stripped, refused, full_org, hour)
    with django_db_blocker.unblock():
        Organization.objects.filter(pk__in=[metadata_org.pk, full_org.pk]).delete()


@pytest.fixture(scope="module")
def worker(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A Celery worker process on the test database, consuming its own queue only."""
    assert not celery_app.conf.task_always_eager, "CELERY_TASK_ALWAYS_EAGER must be false"
    assert celery_app.conf.broker_url.startswith("redis://")
    queue = f"test-{uuid.uuid4().hex[:10]}"
    log_path = tmp_path_factory.mktemp("celery") / "worker.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "solo",
            "--concurrency",
            "1",
            "-Q",
            queue,
            "--hostname",
            f"{queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "INFO",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            **_server_env(),
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "CELERY_TASK_ALWAYS_EAGER": "false",
        },
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    yield Worker(process=process, queue=queue, log_path=log_path)
    process.terminate()  # a warm shutdown: the task at hand finishes first
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    # Drop the kombu bookkeeping of the one-off queue (the keys carry the test run's prefix).
    client = redis.Redis.from_url(settings.REDIS_URL)
    stale = list(client.scan_iter(match=f"{settings.REDIS_PREFIX}:celery:*{queue}*"))
    if stale:
        client.delete(*stale)
    client.close()


def _wait_for(worker: Worker, done: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll the database until the worker's effect shows (no result backend is configured)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        if worker.process.poll() is not None:
            raise AssertionError(
                f"the worker exited ({worker.process.returncode}):\n{worker.log()}"
            )
        time.sleep(0.1)
    raise AssertionError(f"the worker did not finish within {timeout}s:\n{worker.log()}")


@pytest.mark.redis
def test_a_worker_purges_an_organization_s_expired_runs_and_forbidden_content(
    worker: Worker, committed: Committed
) -> None:
    purge_expired_runs.apply_async(
        kwargs={"organization_id": committed.metadata_org.pk}, queue=worker.queue
    )

    def purged() -> bool:
        return Run.objects.filter(
            pk=committed.stripped.pk, request_body__isnull=True, upstream_request__isnull=True
        ).exists()

    _wait_for(worker, purged)
    runs = Run.objects.filter(organization=committed.metadata_org)
    assert set(runs.values_list("id", flat=True)) == {committed.stripped.id, committed.refused.id}
    assert RunChunk.objects.filter(run__organization=committed.metadata_org).count() == 1
    refused = runs.get(pk=committed.refused.pk)
    assert bytes(refused.request_body) == BODY  # a 400's body is kept 7 days
    assert RunChunk.objects.filter(run=refused).count() == 1


@pytest.mark.redis
def test_a_worker_keeps_the_hourly_usage_rollups(worker: Worker, committed: Committed) -> None:
    rollup_usage.apply_async(kwargs={"hours": 2}, queue=worker.queue)

    rows = UsageRollup.objects.filter(organization=committed.full_org)
    _wait_for(worker, rows.exists)
    [row] = rows
    assert row.hour == committed.hour
    assert (row.api_key_id, row.end_user, row.model, row.deployment) == (0, "", "", "")
    assert (row.requests, row.errors) == (2, 1)
    assert (row.prompt_tokens, row.completion_tokens, row.cached_tokens) == (22, 10, 0)
    assert row.cost == Decimal("0.000006")
    assert (row.latency_ms_sum, row.ttft_ms_sum, row.ttft_count) == (4000, 300, 2)


def test_the_beat_schedule_names_registered_tasks() -> None:
    celery_app.loader.import_default_modules()
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert {entry["task"] for entry in schedule.values()} <= set(celery_app.tasks)
    assert schedule["purge-expired-runs"]["schedule"] == 3600
    assert schedule["rollup-usage"]["schedule"] == 300
    assert celery_app.conf.timezone == "UTC"


@pytest.mark.parametrize("task", [purge_expired_runs, rollup_usage])
def test_a_lost_database_is_retried_three_times_at_most(task: Any) -> None:
    assert OperationalError in task.autoretry_for
    assert task.max_retries == 3
