"""Crash accounting, in the database: worker leases, and a dead worker's runs closed as
`interrupted` with what was stored (the processes themselves: tests/test_crashed_workers.py)."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction

from accounts.models import Organization
from billing.budgets import Budget
from billing.costs import Prices
from billing.services.ledger import budget_hold, budget_holds_reconcile
from telemetry.models import Run, RunChunk, WorkerLease
from telemetry.services.interruptions import (
    UNOWNED_AFTER,
    WORKER_INTERRUPTED,
    orphaned_runs,
    runs_interrupt_orphaned,
    runs_reopen,
    worker_lease_release,
    worker_lease_renew,
)
from telemetry.store.batches import write_batch
from telemetry.store.items import ChunkSent, RunClosed
from telemetry.tasks import interrupt_orphaned_runs
from tests.support.budgets import committed
from tests.support.runs import query_plan
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db

# No real key's id: other tests commit ledger rows of their keys.
KEY_ID = 10**12 + 15
USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


@pytest.fixture
def org() -> Organization:
    return Organization.objects.create(name=f"crash-{uuid.uuid4().hex[:12]}")


def lease(*, expired: bool, renewed_at: datetime | None = None) -> str:
    """A lease row: expired (its worker died) or live."""
    now = datetime.now(UTC)
    renewed_at = renewed_at or now - timedelta(seconds=40)
    worker_id = uuid.uuid4().hex[:16]
    WorkerLease.objects.create(
        id=worker_id,
        host="test",
        pid=1,
        started_at=renewed_at - timedelta(hours=1),
        renewed_at=renewed_at,
        expires_at=now - timedelta(seconds=10) if expired else now + timedelta(hours=1),
    )
    return worker_id


def run(
    org: Organization,
    *,
    worker: str,
    status: str = Run.Status.IN_PROGRESS,
    age: timedelta = timedelta(minutes=1),
    chunks: int = 0,
) -> Run:
    accepted_at = datetime.now(UTC) - age
    made = Run.objects.create(
        id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
        organization=org,
        status=status,
        worker=worker,
        stream=True,
        accepted_at=accepted_at,
        prompt_tokens=12,
        usage=USAGE if chunks else None,
    )
    RunChunk.objects.bulk_create(
        RunChunk(run=made, seq=seq, offset_us=(seq + 1) * 1_000_000, data=b"data: {}\n\n")
        for seq in range(chunks)
    )
    return made


def closed_of(org: Organization, **options: int) -> int:
    """How many of the organization's runs one sweep closed (the database may hold other
    tests' committed orphans: the sweep closes those too)."""
    return sum(run.organization_id == org.pk for run in runs_interrupt_orphaned(**options))


def test_a_lease_is_taken_then_renewed_and_released() -> None:
    worker_id = uuid.uuid4().hex[:16]
    assert worker_lease_renew(worker_id=worker_id, host="h", pid=7, seconds=30) is False
    first = WorkerLease.objects.get(id=worker_id)
    assert (first.host, first.pid) == ("h", 7)
    assert first.expires_at > first.renewed_at

    assert worker_lease_renew(worker_id=worker_id, host="h", pid=7, seconds=30) is True
    assert WorkerLease.objects.get(id=worker_id).expires_at >= first.expires_at

    worker_lease_release(worker_id=worker_id)
    assert not WorkerLease.objects.filter(id=worker_id).exists()


def test_an_expired_lease_renewed_says_it_had_expired() -> None:
    worker_id = lease(expired=True)
    assert worker_lease_renew(worker_id=worker_id, host="h", pid=7, seconds=30) is False
    assert WorkerLease.objects.get(id=worker_id).expires_at > datetime.now(UTC)
    assert worker_lease_renew(worker_id=worker_id, host="h", pid=7, seconds=30) is True


def test_a_dead_worker_s_run_is_closed_as_interrupted_with_what_was_stored(
    org: Organization,
) -> None:
    renewed_at = datetime.now(UTC) - timedelta(seconds=50)
    dead = lease(expired=True, renewed_at=renewed_at)
    streaming = run(org, worker=dead, chunks=3, age=timedelta(seconds=60))

    assert closed_of(org) == 1

    streaming.refresh_from_db()
    assert streaming.status == Run.Status.INTERRUPTED
    assert streaming.error_code == WORKER_INTERRUPTED
    assert dead in streaming.error_message
    assert streaming.chunk_count == 3
    assert RunChunk.objects.filter(run=streaming).count() == 3
    assert streaming.usage == USAGE  # what was stored is kept
    assert streaming.prompt_tokens == 12
    # Ended when the worker was last seen: its last chunk (at 3 s) or its last renewal,
    # whichever is later.
    assert streaming.finished_at == max(streaming.accepted_at + timedelta(seconds=3), renewed_at)
    # Safe to run again: nothing left to close.
    assert closed_of(org) == 0


def test_a_run_ends_at_its_last_stored_chunk_when_that_is_after_the_last_renewal(
    org: Organization,
) -> None:
    dead = lease(expired=True, renewed_at=datetime.now(UTC) - timedelta(minutes=10))
    streaming = run(org, worker=dead, chunks=2, age=timedelta(seconds=30))
    assert closed_of(org) == 1
    streaming.refresh_from_db()
    assert streaming.finished_at == streaming.accepted_at + timedelta(seconds=2)


def test_only_runs_in_progress_whose_worker_is_gone_are_closed(org: Organization) -> None:
    dead, alive = lease(expired=True), lease(expired=False)
    orphan = run(org, worker=dead)
    never_leased = run(org, worker="f" * 16)  # its lease row is gone: released, or purged
    live = run(org, worker=alive)
    finished = run(org, worker=dead, status=Run.Status.COMPLETED)
    unowned_recent = run(org, worker="", age=UNOWNED_AFTER - timedelta(minutes=1))
    unowned_old = run(org, worker="", age=UNOWNED_AFTER + timedelta(minutes=1))

    assert closed_of(org) == 3

    statuses = dict(Run.objects.filter(organization=org).values_list("id", "status"))
    assert statuses == {
        orphan.id: Run.Status.INTERRUPTED,
        never_leased.id: Run.Status.INTERRUPTED,
        unowned_old.id: Run.Status.INTERRUPTED,
        live.id: Run.Status.IN_PROGRESS,
        unowned_recent.id: Run.Status.IN_PROGRESS,
        finished.id: Run.Status.COMPLETED,
    }


def test_every_orphan_is_closed_past_one_batch(org: Organization) -> None:
    dead = lease(expired=True)
    for _ in range(7):
        run(org, worker=dead)
    assert closed_of(org, batch=3) == 7
    assert not Run.objects.filter(organization=org, status=Run.Status.IN_PROGRESS).exists()


@pytest.mark.postgres
def test_the_sweep_finds_runs_in_progress_by_the_index_of_runs_not_completed() -> None:
    """Each heartbeat sweeps: it must not read every run stored (telemetry migration 0019)."""
    plan = query_plan(orphaned_runs().values_list("id")[:100])
    assert "run_not_completed" in plan, plan


def test_chunks_and_an_outcome_that_arrive_late_are_stored_on_an_interrupted_run(
    org: Organization,
) -> None:
    """A dead worker's spool (or a chunk log) replayed later: the real outcome wins."""
    dead = lease(expired=True)
    streaming = run(org, worker=dead, chunks=2)
    assert closed_of(org) == 1

    write_batch(
        [
            ChunkSent(streaming.id, 2, 3_500_000, b"data: late\n\n"),
            RunClosed(
                streaming.id,
                {"status": Run.Status.COMPLETED, "http_status": 200, "chunk_count": 3},
            ),
        ],
        replay=True,
    )

    streaming.refresh_from_db()
    assert RunChunk.objects.filter(run=streaming).count() == 3
    assert (streaming.status, streaming.chunk_count) == (Run.Status.COMPLETED, 3)


def test_chunks_replayed_after_the_run_was_closed_as_interrupted_are_counted(
    org: Organization,
) -> None:
    """A dead writer's log, claimed by a live writer after a sweep closed the run with the
    chunks stored then: the run's count takes in the chunks its clients had received."""
    dead = lease(expired=True)
    streaming = run(org, worker=dead, chunks=2)
    finished = run(org, worker=dead, status=Run.Status.COMPLETED, chunks=1)
    assert closed_of(org) == 1
    streaming.refresh_from_db()
    assert streaming.chunk_count == 2

    write_batch(
        [
            ChunkSent(streaming.id, 2, 3_500_000, b"data: late\n\n"),
            ChunkSent(streaming.id, 3, 3_600_000, b"data: later\n\n"),
            ChunkSent(finished.id, 0, 1_000_000, b"data: {}\n\n"),  # already stored
        ],
        replay=True,
    )

    streaming.refresh_from_db()
    assert (streaming.status, streaming.chunk_count) == (Run.Status.INTERRUPTED, 4)
    assert RunChunk.objects.filter(run=streaming).count() == 4
    finished.refresh_from_db()
    assert finished.chunk_count == 0  # a run that closed itself keeps the count it stored


class OnItsOwnConnection:
    """`work` on a thread and a database connection of its own."""

    def __init__(self, work: Callable[[], object]) -> None:
        self.backend_pid = 0
        self.error: BaseException | None = None
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()
        assert self._connected.wait(10), "no connection"

    def _run(self, work: Callable[[], object]) -> None:
        try:
            connection.ensure_connection()
            self.backend_pid = connection.connection.info.backend_pid
            self._connected.set()
            work()
        except BaseException as exc:  # re-raised by `join`, in the test
            self.error = exc
        finally:
            self._connected.set()
            connection.close()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def activity(self) -> tuple[str | None, ...] | None:
        """What its backend is doing: state, wait event type and name, query."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # else read once a transaction
            cursor.execute(
                "SELECT state, wait_event_type, wait_event, query FROM pg_stat_activity "
                "WHERE pid = %s",
                [self.backend_pid],
            )
            return cursor.fetchone()

    def waits_for_a_lock(self) -> bool:
        activity = self.activity()
        return activity is not None and activity[1] == "Lock"

    def __repr__(self) -> str:
        return f"<done={self.done} error={self.error!r} activity={self.activity()!r}>"

    def join(self) -> None:
        self._thread.join(30)
        assert self.done, "still running after 30 s"
        if self.error is not None:
            raise self.error


class _RolledBack(Exception):
    pass


def held_open(do: Callable[[], object], release: threading.Event) -> OnItsOwnConnection:
    """A transaction of its own that has done `do` and stays open until `release`, then is
    rolled back."""
    done = threading.Event()

    def hold() -> None:
        with contextlib.suppress(_RolledBack), transaction.atomic():
            do()
            done.set()
            release.wait(30)
            raise _RolledBack

    holder = OnItsOwnConnection(hold)
    assert done.wait(10), holder.error
    return holder


@pytest.fixture
def orphan_committed() -> Iterator[Run]:
    """A run with 2 chunks stored, committed for other connections to see. Its worker's lease
    is live until `worker_dies`: the servers of other tests sweep this database too, and would
    close the run before the test has set up its moment."""

    def make() -> Run:
        org = Organization.objects.create(name=f"crash-{uuid.uuid4().hex[:12]}")
        return run(org, worker=lease(expired=False), chunks=2)

    orphan = committed(make)
    yield orphan
    committed(lambda: Organization.objects.filter(pk=orphan.organization_id).delete())
    committed(lambda: WorkerLease.objects.filter(id=orphan.worker).delete())


def worker_dies(orphan: Run) -> None:
    """The run's worker's lease expires: any sweep may close the run now."""
    expired = datetime.now(UTC) - timedelta(seconds=10)
    committed(lambda: WorkerLease.objects.filter(id=orphan.worker).update(expires_at=expired))


def late_chunks(orphan: Run) -> list[ChunkSent]:
    """The two chunks after the stored ones, as a dead writer's log holds them."""
    return [
        ChunkSent(orphan.id, 2, 3_500_000, b"data: late\n\n"),
        ChunkSent(orphan.id, 3, 3_600_000, b"data: later\n\n"),
    ]


def status_and_counts(orphan: Run) -> tuple[str, int, int]:
    """The run's status, chunk count and stored chunks, as committed."""

    def read() -> tuple[str, int, int]:
        closed = Run.objects.get(pk=orphan.pk)
        return closed.status, closed.chunk_count, RunChunk.objects.filter(run=closed).count()

    return committed(read)


@pytest.mark.postgres
def test_a_replay_while_a_sweep_is_closing_the_run_is_counted(orphan_committed: Run) -> None:
    """What CI once met: a sweep counted a run's stored chunks, a replay of more of them
    (a dead writer's log, drained by its successor) committed, and the sweep then closed the
    run with the count it had taken. The moment is made here by a transaction that holds the
    run's row: the sweep waits on it to close the run, and the replay goes on if it can."""
    release = threading.Event()
    holder = held_open(
        lambda: list(
            Run.objects.select_for_update(no_key=True)
            .filter(pk=orphan_committed.pk)
            .values_list("pk", flat=True)
        ),
        release,
    )
    try:
        worker_dies(orphan_committed)
        sweep = OnItsOwnConnection(runs_interrupt_orphaned)
        wait_until(
            sweep.waits_for_a_lock, message=lambda: f"the sweep never met the held run: {sweep}"
        )
        replay = OnItsOwnConnection(lambda: write_batch(late_chunks(orphan_committed), replay=True))
        wait_until(lambda: replay.done or replay.waits_for_a_lock())
    finally:
        release.set()
    for each in (holder, sweep, replay):
        each.join()

    assert status_and_counts(orphan_committed) == (Run.Status.INTERRUPTED, 4, 4)


@pytest.mark.postgres
def test_a_sweep_waits_for_a_replay_of_the_run_s_chunks_to_commit(orphan_committed: Run) -> None:
    """The other order: a replay has begun and not yet committed (it holds the run and waits
    here, to store the run's late chunks, on a transaction that keeps the chunk table from
    taking rows). A sweep closing the run then would count without them, and the replay,
    seeing the run still in progress, would not count again."""
    release = threading.Event()

    def block_chunk_inserts() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {RunChunk._meta.db_table} IN SHARE MODE")

    holder = held_open(block_chunk_inserts, release)
    try:
        replay = OnItsOwnConnection(lambda: write_batch(late_chunks(orphan_committed), replay=True))
        wait_until(
            replay.waits_for_a_lock, message=lambda: f"the replay never met the chunk: {replay}"
        )
        worker_dies(orphan_committed)
        sweep = OnItsOwnConnection(runs_interrupt_orphaned)
        wait_until(
            sweep.waits_for_a_lock,
            message=lambda: f"the sweep did not wait for the replay: {sweep}",
        )
    finally:
        release.set()
    for each in (holder, replay, sweep):
        each.join()

    assert status_and_counts(orphan_committed) == (Run.Status.INTERRUPTED, 4, 4)


def test_a_worker_that_was_only_cut_off_reopens_the_runs_closed_against_it(
    org: Organization,
) -> None:
    worker_id = lease(expired=True)
    mine = run(org, worker=worker_id, chunks=1)
    theirs = run(org, worker=lease(expired=True))
    stopped_mine = run(org, worker=worker_id, status=Run.Status.STOPPED)
    assert closed_of(org) == 2

    assert runs_reopen(worker_id=worker_id) == 1

    mine.refresh_from_db()
    assert (mine.status, mine.finished_at, mine.error_code) == (Run.Status.IN_PROGRESS, None, "")
    assert Run.objects.get(id=theirs.id).status == Run.Status.INTERRUPTED
    assert Run.objects.get(id=stopped_mine.id).status == Run.Status.STOPPED


def test_an_interrupted_run_s_hold_charges_its_stored_cost_or_else_its_prompt(
    org: Organization,
) -> None:
    """Reconciled on expiry like any hold of a dead worker: never charged nothing."""
    dead = lease(expired=True)
    without_cost = run(org, worker=dead, chunks=1)
    with_cost = run(org, worker=dead, chunks=2)
    Run.objects.filter(id=with_cost.id).update(cost=Decimal("0.000250"))
    budget = Budget("key", KEY_ID, Decimal("1"), "total")
    now = datetime.now(UTC)
    for held in (without_cost, with_cost):
        budget_hold(
            run_id=held.id,
            budgets=[budget],
            prompt_tokens=100,
            max_tokens=100,
            prices=Prices(input=Decimal("1.2"), output=Decimal("2")),
            expires_at=now - timedelta(seconds=1),
            now=now,
        )
    assert closed_of(org) == 2

    assert budget_holds_reconcile(now=now) == 2

    charged = dict(Run.objects.filter(organization=org).values_list("id", "charged_usd"))
    assert charged == {without_cost.id: Decimal("0.000120"), with_cost.id: Decimal("0.000250")}


def test_the_beat_task_closes_a_dead_worker_s_runs(org: Organization) -> None:
    dead = lease(expired=True)
    runs = [run(org, worker=dead, chunks=1) for _ in range(2)]

    assert interrupt_orphaned_runs() >= 2

    statuses = Run.objects.filter(id__in=[r.id for r in runs]).values_list("status", flat=True)
    assert set(statuses) == {Run.Status.INTERRUPTED}
