"""This worker process's lease: a heartbeat in the database, and the sweep for dead workers.

Started by the ASGI lifespan (`config/asgi.py`), one per server process. A background task
renews the lease every third of `MORTAR_WORKER_LEASE_SECONDS`, on a thread of its own, on a
connection opened for the beat and closed after it — never on the request path, never inside a
stream — and on each beat closes the runs of workers whose lease expired
(`telemetry.services.interruptions`).

The runs this process accepts name its lease (`worker_of_new_runs`) once the lease is in the
database: a run is never owned by a lease other workers could take for missing.

After losing the database a worker sweeps again only once it has renewed its own lease for a
whole lease time without a failure: every other live worker has renewed its own by then, so an
outage longer than the lease does not make the first worker back close the others' runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, TypeVar

from django.conf import settings
from django.db import connection

from core.loops import PerLoop
from telemetry.events import event_publisher
from telemetry.services.interruptions import (
    WORKER_INTERRUPTED,
    Orphan,
    interruption_message,
    runs_interrupt_orphaned,
    runs_reopen,
    worker_lease_release,
    worker_lease_renew,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How long start-up waits for the first renewal (the database may be away: it goes on then).
FIRST_BEAT_WAIT_SECONDS = 2.0
RELEASE_TIMEOUT_SECONDS = 5.0
FAILURE_LOG_EVERY_SECONDS = 30.0


class Beat(NamedTuple):
    """What one beat did besides renewing: runs reopened (None: no need), runs closed."""

    reopened: int | None
    closed: list[Orphan]


class WorkerHeartbeat:
    """Hold this worker's lease while it runs; close the runs of workers that died."""

    def __init__(self, *, lease_seconds: float) -> None:
        self.worker_id = secrets.token_hex(8)
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / 3
        self.registered = False  # the lease is in the database: new runs may name it
        self.interrupted_total = 0  # runs of dead workers this worker closed
        self._connected_since: float | None = None
        self._reopen_pending = False
        self._failure_logged_at = 0.0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker-lease")
        self._task: asyncio.Task[None] | None = None
        self._first_beat = asyncio.Event()

    @property
    def owner(self) -> str:
        """The lease new runs name: this worker's once registered, else none."""
        return self.worker_id if self.registered else ""

    async def start(self) -> None:
        """Take the lease now (so the first runs are owned), then keep it in the background."""
        if self._task is not None:
            return
        self._task = asyncio.get_running_loop().create_task(self._keep())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_beat.wait(), FIRST_BEAT_WAIT_SECONDS)

    async def stop(self) -> None:
        """Stop renewing and give the lease up: this worker's runs are all closed by now."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            if self.registered:
                await asyncio.wait_for(
                    self._on_thread(lambda: worker_lease_release(worker_id=self.worker_id)),
                    RELEASE_TIMEOUT_SECONDS,
                )
        except Exception:  # the lease then expires on its own
            logger.warning("worker lease: could not release %s", self.worker_id, exc_info=True)
        finally:
            self._executor.shutdown(wait=False)

    async def _keep(self) -> None:
        while True:
            try:
                await self.beat()
            except Exception:  # a bug must not end the heartbeat: the lease would expire
                logger.exception("worker lease %s: unexpected error", self.worker_id)
            self._first_beat.set()
            await asyncio.sleep(self.interval)

    async def beat(self) -> None:
        """Renew the lease; then, if connected for a whole lease, close dead workers' runs."""
        connected_for = (
            0.0 if self._connected_since is None else time.monotonic() - self._connected_since
        )
        try:
            done = await self._on_thread(lambda: self._beat_here(connected_for))
        except Exception as exc:  # the database is away: try again next beat
            self._connected_since = None
            self._log_failure(exc)
            return
        if self._connected_since is None:
            self._connected_since = time.monotonic()
        self.registered = True
        self._reopen_pending = done.reopened is None and self._reopen_pending
        if done.reopened is not None:
            logger.warning(
                "worker lease %s had expired; %d of its runs reopened",
                self.worker_id,
                done.reopened,
            )
        if done.closed:
            self.interrupted_total += len(done.closed)
            logger.warning("closed %d runs of workers that died as interrupted", len(done.closed))
            self._publish(done.closed)

    def _beat_here(self, connected_for: float) -> Beat:
        """One beat's database work, on the heartbeat's thread."""
        held = worker_lease_renew(
            worker_id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            seconds=self.lease_seconds,
        )
        reopened = None
        if self._reopen_pending or (self.registered and not held):
            # Cut off for longer than the lease: others may have closed this worker's runs.
            self._reopen_pending = True  # until done: a failure is tried again next beat
            reopened = runs_reopen(worker_id=self.worker_id)
        closed: list[Orphan] = []
        # Connected for a whole lease: every live worker has renewed its own by now.
        if connected_for >= self.lease_seconds:
            try:
                closed = runs_interrupt_orphaned()
            except Exception as exc:  # the lease is renewed all the same
                self._log_failure(exc)
        return Beat(reopened=reopened, closed=closed)

    def _publish(self, closed: list[Orphan]) -> None:
        """Tell the runs' telemetry subscribers they ended, as their own worker would have."""
        events = event_publisher()
        for run in closed:
            events.publish(
                run.organization_id,
                "generation.failed",
                run.id,
                session=run.session,
                httpStatus=None,
                code=WORKER_INTERRUPTED,
                message=interruption_message(run.worker),
            )

    async def _on_thread(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the heartbeat's thread, on a connection of its own for the call.

        Closed after each call: a beat every few seconds needs no connection held open
        between beats (one idle backend fewer per worker).
        """

        def call() -> T:
            try:
                return fn()
            finally:
                connection.close()

        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _log_failure(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._failure_logged_at >= FAILURE_LOG_EVERY_SECONDS:
            self._failure_logged_at = now
            logger.warning("worker lease %s: %s: %s", self.worker_id, type(exc).__name__, exc)


def _new_heartbeat() -> WorkerHeartbeat:
    return WorkerHeartbeat(lease_seconds=settings.MORTAR_WORKER_LEASE_SECONDS)


# The running loop's heartbeat (one per worker process in production).
worker_heartbeat = PerLoop(_new_heartbeat)


def worker_of_new_runs() -> str:
    """The lease a run accepted now belongs to; none where no lease is held (tests in-process,
    a process started while the database was away)."""
    heartbeat = worker_heartbeat.current()
    return heartbeat.owner if heartbeat is not None else ""


async def start_worker_heartbeat() -> None:
    await worker_heartbeat().start()


async def stop_worker_heartbeat() -> None:
    heartbeat = worker_heartbeat.pop()
    if heartbeat is not None:
        await heartbeat.stop()
