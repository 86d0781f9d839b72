"""The run writer: a background task that batches run and chunk rows into the database.

The request path only appends to an in-memory queue (never awaits the database or the disk); a
task in the same event loop drains it every few milliseconds and writes each batch in one
transaction (``telemetry.store.batches``), on a dedicated thread that keeps its own database
connection.

Writing must never slow a stream or lose a row, and must survive a database outage. So:

- When a batch fails because the database is away (OperationalError / InterfaceError: refused
  or dropped connections, a terminated backend), the writer moves everything queued to its
  spool file (``telemetry.store.spool``; fsync'ed) and retries with exponential backoff,
  spooling what arrives meanwhile, so memory stays bounded. It also spools when it falls more
  than ``MORTAR_WRITER_SPILL_AT`` rows behind.
- The spool holds the oldest rows, so while it has any the writer drains it first, batch by
  batch, and deletes each file once it is written. At start it also claims and drains the
  spool files of dead processes. Those batches are replayed: written so that rows already in
  the database (a commit whose acknowledgment was lost) are neither duplicated nor fail them.
- On shutdown ``close()`` writes what it can; what it cannot stays in the spool for the next
  start.
- Against a crash (kill -9), every row queued is also appended to the writer's log
  (``telemetry.store.chunklog``, a file mapped into memory: a copy, no system call) and
  acknowledged there once it is in the database or the spool; a writer starting up (and every
  minute after) moves the rows dead processes' logs hold unacknowledged into its spool, after
  their spool files.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection

from core.db import DatabaseAway, drop_broken_connection
from telemetry.store import chunklog
from telemetry.store.batches import database_reachable, write_batch, write_runs_one_by_one
from telemetry.store.gauges import report_writer_depth
from telemetry.store.items import ChunkSent, WriterItem, decode_row, encode_row
from telemetry.store.spool import Spool

logger = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_BACKOFF_SECONDS = 0.1
MAX_BACKOFF_SECONDS = 5.0
# A database that answers `SELECT 1` yet keeps failing one batch with an OperationalError is
# refusing that batch, not away: after this many tries it is written run by run instead.
POISON_AFTER_FAILURES = 3
LAG_WARNING_SECONDS = 5.0
LAG_LOG_EVERY_SECONDS = 10.0
ORPHAN_SCAN_SECONDS = 60.0
CLOSE_TIMEOUT_SECONDS = 10.0
# How much longer than its `write_for` a close waits for a database call in progress.
STUCK_SECONDS = 5.0
MARK_EVERY_SECONDS = 0.05
# A writer behind (more than `batch_size` rows queued) takes up to this many batches' rows in one
# transaction. Each batch costs a round trip through the event loop and the GIL, whatever its
# size, and under a busy loop that trip is the pass of the loop (tens of ms): at 20,000 chunks/s
# batches of 2,000 came back too slowly to keep up (docs/performance.md).
CATCH_UP_BATCHES = 8


def _close_connection() -> None:
    connection.close()


class RunWriter:
    """Queue rows from the request path; write them in batches in the background."""

    def __init__(
        self,
        *,
        batch_size: int,
        interval: float,
        spool_dir: Path | None = None,
        spill_at: int | None = None,
        log_dir: Path | None = None,
    ):
        self.batch_size = batch_size
        self.interval = interval
        self.spill_at: int = spill_at or settings.MORTAR_WRITER_SPILL_AT
        self._queue: deque[WriterItem] = deque()
        # (index of a submitted row, when it was submitted), at most every MARK_EVERY_SECONDS;
        # the first mark is the newest one at or before the queue's head. They give the lag.
        self._marks: deque[tuple[int, float]] = deque()
        self._submitted = 0
        self._taken = 0
        self._has_work = asyncio.Event()
        self._batch_full = asyncio.Event()
        self._wake = asyncio.Event()  # cuts a backoff short: closing, or too much queued
        self._idle = asyncio.Event()
        self._idle.set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="run-writer")
        var_dir = Path(settings.VAR_DIR)
        self._spool = Spool(spool_dir or var_dir / "spool")
        if log_dir is None:  # beside the spool: a writer given a spool of its own keeps to it
            log_dir = spool_dir.with_name(f"{spool_dir.name}-log") if spool_dir else None
        self._log = chunklog.ChunkLog(log_dir or var_dir / "chunklog")
        # Copies of the spool's counters, refreshed after each call on the writer's thread.
        self._spooled = 0
        self._spooled_since: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._close_deadline = 0.0
        self._late_rows_logged = False
        self._failures = 0  # consecutive failed attempts at the oldest batch
        self.spilled_total = 0  # rows that went through the spool, over the writer's life
        self.last_error: str | None = None
        self.last_error_at: datetime | None = None
        self._lag_logged_at = 0.0

    # The request path.

    @property
    def depth(self) -> int:
        return len(self._queue)

    @property
    def spooled(self) -> int:
        return self._spooled

    @property
    def lag_seconds(self) -> float:
        """How long the oldest row not yet in the database has waited."""
        lag = 0.0
        if self._queue and self._marks:
            lag = time.monotonic() - self._marks[0][1]
        if self._spooled and self._spooled_since is not None:
            lag = max(lag, time.time() - self._spooled_since)
        return lag

    def submit(self, item: WriterItem) -> None:
        """Queue a row; never blocks and never waits on the database or the disk (the crash log
        is a copy into the page cache: the row is in it when this returns)."""
        if type(item) is ChunkSent:
            self._log.append_chunk(item)
        else:
            self._log.append_row(encode_row(item))
        now = time.monotonic()
        if not self._marks or now - self._marks[-1][1] >= MARK_EVERY_SECONDS:
            self._marks.append((self._submitted, now))
        self._submitted += 1
        self._queue.append(item)
        self._idle.clear()
        self._has_work.set()
        depth = len(self._queue)
        if depth >= self.batch_size:
            self._batch_full.set()
            if depth >= self.spill_at:
                self._wake.set()
        if self._task is None or self._task.done():
            self.start()

    def start(self) -> None:
        """Start writing in the running loop (and drain what dead processes left behind)."""
        if self._closing:
            # Too late: close() is done; rows that come now have nowhere to go.
            if not self._late_rows_logged:
                self._late_rows_logged = True
                logger.error("run writer: rows submitted after close() are not written")
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain_forever())

    async def flush(self) -> None:
        """Wait until everything queued so far is written."""
        if self._queue:
            self._batch_full.set()  # don't wait for the batch to fill
        await self._idle.wait()

    async def close(self, *, write_for: float = CLOSE_TIMEOUT_SECONDS) -> None:
        """Write what can be written within `write_for` seconds; leave the rest in the spool."""
        self._closing = True
        self._close_deadline = time.monotonic() + write_for
        for event in (self._has_work, self._batch_full, self._wake):
            event.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), write_for + STUCK_SECONDS)
            except TimeoutError:
                # The writer's thread hangs in a database call (a network that drops packets
                # without resetting): spool the queue to a file of its own and give up on it.
                self._task.cancel()
                self._spool_aside()
                self._log.close()
                self._executor.shutdown(wait=False)
                return
        self._log.close()  # deleted if every row is stored, else left for the next start
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._spool.close)
        await loop.run_in_executor(self._executor, _close_connection)
        self._executor.shutdown(wait=True)

    def _spool_aside(self) -> None:
        """Write the queue to a new spool file, from the event loop (the thread is stuck)."""
        if not self._queue:
            return
        rows = [encode_row(item) for item in self._queue]
        spool = Spool(self._spool.directory)
        try:
            spool.append(
                [rows[i : i + self.batch_size] for i in range(0, len(rows), self.batch_size)],
                time.time(),
            )
        except Exception:
            logger.exception(
                "run writer: lost %d rows: the database hangs and the disk fails", len(rows)
            )
            return
        finally:
            spool.close()
        self._log.ack(self._submitted)
        logger.error(
            "run writer: the database hangs; %d queued rows spooled for the next start", len(rows)
        )

    # The writer's task.

    async def _on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` on the writer's thread; refresh the spool counters after it, even on error."""

        def call() -> T:
            try:
                return fn(*args)
            finally:
                self._spooled = self._spool.pending
                self._spooled_since = self._spool.oldest_at

        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _drain_forever(self) -> None:
        next_scan = 0.0
        while True:
            # Once a batch, never per row: what /metrics shows of this writer.
            report_writer_depth(len(self._queue), self._spooled)
            if time.monotonic() >= next_scan:  # at start, then now and then
                await self._claim_orphans()
                next_scan = time.monotonic() + ORPHAN_SCAN_SECONDS
            if not self._queue and not self._spooled:
                if self._closing:
                    return
                self._idle.set()
                self._has_work.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._has_work.wait(), ORPHAN_SCAN_SECONDS)
                continue
            if self._closing and time.monotonic() >= self._close_deadline:
                await self._spill()  # out of time: the next start writes the rest
                return
            try:
                written = await self._write_next()
            except Exception:  # a bug or a full disk must not end the writer
                logger.exception("run writer: unexpected error")
                written = False
            self._log_lag()
            if written:
                if self._failures:
                    logger.warning(
                        "run writer: the database is back after %d failed tries", self._failures
                    )
                self._failures = 0
                continue
            self._failures += 1
            await self._spill()  # memory stays bounded while the database is away
            if self._closing:
                return
            await self._back_off()

    async def _write_next(self) -> bool:
        """Write the oldest batch; False if the database is away (the batch stays)."""
        if self._spooled:
            # The spool holds the oldest rows: they go first, and new ones wait behind them.
            if self._queue and (self._failures or len(self._queue) >= self.spill_at):
                await self._spill()
            return await self._try(self._write_spool_head)
        if len(self._queue) < self.batch_size and not self._batch_full.is_set():
            # Let a few more rows join the batch, unless it is already full.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._batch_full.wait(), self.interval)
        self._batch_full.clear()
        if len(self._queue) >= self.spill_at:  # far behind: keep memory bounded
            await self._spill()
            return True
        batch = list(itertools.islice(self._queue, self.batch_size * CATCH_UP_BATCHES))
        if not await self._try(self._write, batch, False):
            return False
        self._take(len(batch))
        self._log.ack(self._taken)
        return True

    async def _try(self, fn: Callable[..., None], *args: Any) -> bool:
        try:
            await self._on_thread(fn, *args)
        except DatabaseAway as exc:
            self.last_error = f"{exc.__class__.__name__}: {' '.join(str(exc).split())[:500]}"
            self.last_error_at = datetime.now(UTC)
            logger.warning(
                "run writer: the database is away (%s); %d rows queued, %d spooled",
                self.last_error,
                len(self._queue),
                self._spooled,
            )
            return False
        return True

    def _write(self, items: Sequence[WriterItem], replay: bool) -> None:
        """Write one batch (on the writer's thread); fall back to run by run if it is refused."""
        drop_broken_connection()  # a connection the last batch found broken is replaced
        try:
            write_batch(items, replay=replay)
        except DatabaseAway:
            if self._failures < POISON_AFTER_FAILURES or not database_reachable():
                raise
            logger.error("run writer: the database is up but refuses a batch; run by run now")
            write_runs_one_by_one(items)
        except Exception:
            # A row the database refuses must not block every run behind it.
            logger.exception("run writer: a batch was refused; writing it run by run")
            write_runs_one_by_one(items)

    def _write_spool_head(self) -> None:
        rows = self._spool.head()
        if rows is None:
            return
        try:
            items = [decode_row(row) for row in rows]
        except Exception:  # not rows this writer knows: retrying would never end
            logger.exception(
                "run writer: dropped a spooled batch it cannot read (%d rows)", len(rows)
            )
        else:
            self._write(items, True)
        self._spool.advance()

    def _take(self, count: int) -> list[WriterItem]:
        """Remove the oldest `count` rows from the queue."""
        if count == len(self._queue):
            items = list(self._queue)
            self._queue.clear()
        else:
            items = [self._queue.popleft() for _ in range(count)]
        self._taken += count
        while len(self._marks) > 1 and self._marks[1][0] <= self._taken:
            self._marks.popleft()
        if not self._queue:
            self._marks.clear()
        return items

    async def _spill(self) -> None:
        """Move everything queued to the spool, in order, durably."""
        if not self._queue:
            return
        oldest = self._marks[0][1] if self._marks else time.monotonic()
        queued_at = time.time() - (time.monotonic() - oldest)
        count = len(self._queue)
        items = self._take(count)
        try:
            await self._on_thread(self._append_to_spool, items, queued_at)
            self.spilled_total += count
            self._log.ack(self._taken)
        except Exception:
            # The disk refused too: keep the rows in memory, in order, and try again later.
            logger.exception("run writer: could not spool %d rows; keeping them queued", count)
            self._queue.extendleft(reversed(items))
            self._taken -= count
            self._marks.appendleft((self._taken, oldest))
            self._idle.clear()

    def _append_to_spool(self, items: list[WriterItem], queued_at: float) -> None:
        rows = [encode_row(item) for item in items]
        size = self.batch_size
        self._spool.append([rows[i : i + size] for i in range(0, len(rows), size)], queued_at)

    async def _claim_orphans(self) -> None:
        try:
            await self._on_thread(self._claim_leftovers)
        except Exception:
            logger.exception("run writer: could not claim leftover spool files and logs")

    def _claim_leftovers(self) -> None:
        """Claim dead processes' spool files, then the rows their logs hold unacknowledged.

        One claimer at a time (the log directory's lock), logs before spool files: a process
        that dies in between leaves both for the next claim, never its log rows (newer)
        replayed before its spool (older) — a run's outcome before its row, a chunk before
        its run.
        """
        with chunklog.claim_lock(self._log.directory):
            orphans = chunklog.claim_orphans(self._log.directory)
            try:
                self._spool.claim_orphans()
                if orphans.rows:
                    rows, size = orphans.rows, self.batch_size
                    batches = [rows[i : i + size] for i in range(0, len(rows), size)]
                    self._spool.append_apart(batches, time.time())
            except BaseException:
                orphans.release()  # still locked by nobody: the next claim replays them
                raise
            orphans.remove()

    async def _back_off(self) -> None:
        """Wait before the next try; spool meanwhile if rows pile up, stop waiting to close."""
        delay = min(FIRST_BACKOFF_SECONDS * 2 ** (self._failures - 1), MAX_BACKOFF_SECONDS)
        deadline = time.monotonic() + delay
        while not self._closing and (remaining := deadline - time.monotonic()) > 0:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), remaining)
            if len(self._queue) >= self.spill_at:
                await self._spill()
            self._log_lag()

    def _log_lag(self) -> None:
        now = time.monotonic()
        if now - self._lag_logged_at < LAG_LOG_EVERY_SECONDS:
            return
        lag = self.lag_seconds
        if lag >= LAG_WARNING_SECONDS:
            self._lag_logged_at = now
            logger.warning(
                "run writer: %.1fs behind; %d rows queued, %d spooled",
                lag,
                len(self._queue),
                self._spooled,
            )
