"""Crash accounting: worker leases, and closing the runs of a worker that died as `interrupted`.

Each worker process holds a lease (`WorkerLease`), renewed every few seconds by
`telemetry.leases`; every run it accepts names it (`Run.worker`). A worker killed mid-stream
(kill -9, OOM, a lost host) never closes its runs; once its lease has expired, any live
worker's heartbeat or the Celery beat closes them here as `interrupted`, with what was stored:
chunks and usage are kept, the chunk count is what was stored, the end time is when the worker
was last known alive (its last renewal or its last stored chunk, whichever is later).

- Expiry is judged by the database's clock (`Now()`), never a worker's: hosts whose clocks
  disagree still agree on which lease has expired.
- Closing is a short transaction per group of runs: lock those still in progress (in id
  order), count their stored chunks, close them. Several workers and the beat sweeping at once
  close each run exactly once, and a run whose real outcome was written meanwhile is left
  alone. A replay writing a run's chunks (`telemetry.store.batches.write_batch`) takes the
  same lock (`telemetry.store.run_locks`), so the count is never taken between its chunks and
  its commit: it is taken before them (and the replay counts again), or after.
- A run stays open to late rows: chunks appended after the close are stored as any chunk, and
  an outcome that arrives later (the worker's spool drained by a restarted worker, or a worker
  that was only cut off from the database) replaces the interruption — the real outcome wins.
- A worker that finds its own lease expired while it was alive (cut off from the database for
  longer than its lease) reopens the runs it had closed against it (`runs_reopen`): they are
  still streaming, and their real outcomes follow.
- A run no lease owns (accepted before leases existed, or while its worker could not yet
  register one) is closed once it is `UNOWNED_AFTER` old, longer than any generation runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import transaction
from django.db.models import (
    Count,
    DateTimeField,
    ExpressionWrapper,
    Max,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.utils import timezone

from telemetry.models import Run, RunChunk, WorkerLease
from telemetry.store.run_locks import runs_lock

WORKER_INTERRUPTED = "worker_interrupted"
UNOWNED_AFTER = timedelta(hours=6)
# Expired leases are kept this long (their last renewal dates their runs' end), then deleted.
LEASE_KEPT_FOR = timedelta(days=1)
SWEEP_BATCH = 500
# Runs closed in one transaction: their locks are held only while they are counted and closed.
CLOSE_TOGETHER = 100


class Orphan(NamedTuple):
    """A run in progress no live worker serves, with what was stored of its stream."""

    id: str
    organization_id: int
    session: str
    worker: str
    accepted_at: datetime


def _from_now(seconds: float) -> ExpressionWrapper[CombinedExpression]:
    return ExpressionWrapper(
        Now() + Value(timedelta(seconds=seconds)), output_field=DateTimeField()
    )


def worker_lease_renew(*, worker_id: str, host: str, pid: int, seconds: float) -> bool:
    """Extend the worker's lease to `seconds` from now; True if it was still held, False if it
    had expired or did not exist (it is taken again, or created)."""
    expires_at = _from_now(seconds)
    held = WorkerLease.objects.filter(id=worker_id, expires_at__gt=Now()).update(
        renewed_at=Now(), expires_at=expires_at
    )
    if held:
        return True
    taken_again = WorkerLease.objects.filter(id=worker_id).update(
        renewed_at=Now(), expires_at=expires_at
    )
    if not taken_again:
        WorkerLease.objects.create(
            id=worker_id,
            host=host,
            pid=pid,
            started_at=Now(),
            renewed_at=Now(),
            expires_at=expires_at,
        )
    return False


def worker_lease_release(*, worker_id: str) -> None:
    """Give the lease up (a clean shutdown): any run of the worker still open is orphaned now."""
    WorkerLease.objects.filter(id=worker_id).delete()


def runs_reopen(*, worker_id: str) -> int:
    """Reopen the runs closed as interrupted against a worker that turns out to be alive."""
    return Run.objects.filter(
        worker=worker_id, status=Run.Status.INTERRUPTED, error_code=WORKER_INTERRUPTED
    ).update(status=Run.Status.IN_PROGRESS, finished_at=None, error_code="", error_message="")


def runs_interrupt_orphaned(*, batch: int = SWEEP_BATCH) -> list[Orphan]:
    """Close as interrupted every run in progress whose worker's lease has expired (or that no
    lease owns and is older than `UNOWNED_AFTER`); return the runs this call closed."""
    closed: list[Orphan] = []
    while True:
        orphans = _orphans(batch)
        last_seen = dict(
            WorkerLease.objects.filter(id__in={run.worker for run in orphans}).values_list(
                "id", "renewed_at"
            )
        )
        for start in range(0, len(orphans), CLOSE_TOGETHER):
            closed.extend(_interrupt(orphans[start : start + CLOSE_TOGETHER], last_seen))
        # Each pass moves on: a run closed here, or by another sweeper, is no longer found.
        if len(orphans) < batch:
            break
    # Their runs all closed, long-expired leases go (a run that names a lease no longer there
    # is closed all the same).
    WorkerLease.objects.filter(
        expires_at__lt=ExpressionWrapper(
            Now() - Value(LEASE_KEPT_FOR), output_field=DateTimeField()
        )
    ).delete()
    return closed


def orphaned_runs() -> QuerySet[Run]:
    """Runs in progress that no live worker serves (found through `run_not_completed`)."""
    live = WorkerLease.objects.filter(expires_at__gt=Now()).values("id")
    dead_owner = ~Q(worker="") & ~Q(worker__in=Subquery(live))
    old_unowned = Q(worker="", accepted_at__lt=timezone.now() - UNOWNED_AFTER)
    return Run.objects.filter(status=Run.Status.IN_PROGRESS).filter(dead_owner | old_unowned)


def _orphans(batch: int) -> list[Orphan]:
    rows = (
        orphaned_runs()
        .values_list("id", "organization_id", "session", "worker", "accepted_at")
        .order_by()[:batch]
    )
    return [Orphan._make(row) for row in rows]


def _interrupt(orphans: list[Orphan], last_seen: dict[str, datetime]) -> list[Orphan]:
    """Close these runs as interrupted, those not closed meanwhile; return the ones closed."""
    with transaction.atomic():
        still_open = runs_lock([run.id for run in orphans], in_progress_only=True)
        closing = [run for run in orphans if run.id in still_open]
        # Counted once locked, so in a statement that sees every replay committed before.
        stored = {
            run_id: (count, last_offset_us)
            for run_id, count, last_offset_us in RunChunk.objects.filter(run_id__in=still_open)
            .values("run_id")
            .annotate(count=Count("*"), last_offset_us=Max("offset_us"))
            .values_list("run_id", "count", "last_offset_us")
            .order_by()
        }
        Run.objects.bulk_update(
            [
                _closed(run, *stored.get(run.id, (0, None)), last_seen.get(run.worker))
                for run in closing
            ],
            ["status", "finished_at", "error_code", "error_message", "chunk_count"],
        )
    return closing


def _closed(
    run: Orphan, stored: int, last_offset_us: int | None, last_renewed: datetime | None
) -> Run:
    """The run's closing fields: ended when its worker was last seen (its last stored chunk or
    its last renewal, whichever is later), with the chunks stored."""
    ends = [run.accepted_at]
    if last_offset_us is not None:
        ends.append(run.accepted_at + timedelta(microseconds=last_offset_us))
    if last_renewed is not None:
        ends.append(last_renewed)
    return Run(
        id=run.id,
        status=Run.Status.INTERRUPTED,
        finished_at=max(ends),
        error_code=WORKER_INTERRUPTED,
        error_message=interruption_message(run.worker),
        chunk_count=stored,
    )


def interruption_message(worker: str) -> str:
    return (
        f"The worker serving this run (lease {worker or 'none'}) stopped before it finished; "
        "the run is closed with what was stored."
    )
