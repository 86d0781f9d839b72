"""The run writer: a background task that batches run and chunk rows into the database.

The request path only appends to an in-memory queue (never awaits the database); a task in the
same event loop drains it every few milliseconds and writes each batch in one transaction, on a
dedicated thread that keeps its own database connection. A failed batch is retried with
backoff, whole, so nothing is written twice or lost while the process lives. On shutdown the
ASGI lifespan flushes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, transaction

from telemetry.models import Run, RunChunk

logger = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class RunOpened:
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChunkSent:
    run_id: str
    seq: int
    offset_us: int
    data: bytes


@dataclass(frozen=True, slots=True)
class RunClosed:
    run_id: str
    fields: dict[str, Any]


WriterItem = RunOpened | ChunkSent | RunClosed


def _text_safe(fields: dict[str, Any]) -> dict[str, Any]:
    """Postgres text cannot hold NUL; drop it from text fields (bytes fields keep theirs)."""
    return {
        key: value.replace("\x00", "") if isinstance(value, str) else value
        for key, value in fields.items()
    }


def write_batch(items: list[WriterItem]) -> None:
    """Write one batch in one transaction: new runs, then chunks, then run updates."""
    new_runs: dict[str, dict[str, Any]] = {}
    updates: dict[str, dict[str, Any]] = {}
    chunks: list[RunChunk] = []
    for item in items:
        if isinstance(item, ChunkSent):
            chunks.append(
                RunChunk(run_id=item.run_id, seq=item.seq, offset_us=item.offset_us, data=item.data)
            )
        elif isinstance(item, RunOpened):
            new_runs[item.fields["id"]] = _text_safe(item.fields)
        elif item.run_id in new_runs:  # opened and closed within one batch: one insert
            new_runs[item.run_id].update(_text_safe(item.fields))
        else:
            updates.setdefault(item.run_id, {}).update(_text_safe(item.fields))

    close_old_connections()
    with transaction.atomic():
        if new_runs:
            Run.objects.bulk_create([Run(**fields) for fields in new_runs.values()])
        if chunks:
            RunChunk.objects.bulk_create(chunks, batch_size=1000)
        for run_id, fields in updates.items():
            Run.objects.filter(pk=run_id).update(**fields)


def write_runs_one_by_one(items: list[WriterItem]) -> None:
    """Write each run's rows in a transaction of their own; log and drop a run that fails."""
    by_run: dict[str, list[WriterItem]] = {}
    for item in items:
        run_id = item.fields["id"] if isinstance(item, RunOpened) else item.run_id
        by_run.setdefault(run_id, []).append(item)
    for run_id, rows in by_run.items():
        try:
            write_batch(rows)
        except Exception:
            logger.exception("run writer: dropped %d rows of run %s", len(rows), run_id)


class RunWriter:
    """Queue rows from the request path; write them in batches in the background."""

    def __init__(self, *, batch_size: int, interval: float):
        self.batch_size = batch_size
        self.interval = interval
        self._queue: deque[WriterItem] = deque()
        self._has_work = asyncio.Event()
        self._batch_full = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="run-writer")
        self._task: asyncio.Task[None] | None = None
        self._oldest_at: float | None = None

    @property
    def depth(self) -> int:
        return len(self._queue)

    @property
    def lag_seconds(self) -> float:
        return 0.0 if self._oldest_at is None else time.monotonic() - self._oldest_at

    def submit(self, item: WriterItem) -> None:
        """Queue a row; never blocks and never touches the database."""
        if not self._queue:
            self._oldest_at = time.monotonic()
        self._queue.append(item)
        self._idle.clear()
        self._has_work.set()
        if len(self._queue) >= self.batch_size:
            self._batch_full.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain_forever())

    async def flush(self) -> None:
        """Wait until everything queued so far is written."""
        if self._queue:
            self._batch_full.set()  # don't wait for the batch to fill
        await self._idle.wait()

    async def close(self) -> None:
        await self.flush()
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=True)

    async def _drain_forever(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = 0.1
        while True:
            if not self._queue:
                self._idle.set()
                self._has_work.clear()
                await self._has_work.wait()
            # Let a few more rows join the batch, unless it is already full.
            if len(self._queue) < self.batch_size and not self._batch_full.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._batch_full.wait(), self.interval)
            self._batch_full.clear()
            batch = [self._queue[i] for i in range(min(self.batch_size, len(self._queue)))]
            try:
                await loop.run_in_executor(self._executor, write_batch, batch)
            except (OperationalError, InterfaceError):
                # The database is away: keep the batch and try again, whole.
                logger.exception(
                    "run writer: a batch of %d rows failed; retrying in %.1fs (queue depth %d)",
                    len(batch),
                    backoff,
                    len(self._queue),
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                continue
            except Exception:
                # A row the database refuses must not block every run behind it.
                logger.exception("run writer: a batch was refused; writing it run by run")
                await loop.run_in_executor(self._executor, write_runs_one_by_one, batch)
            backoff = 0.1
            for _ in batch:
                self._queue.popleft()
            self._oldest_at = time.monotonic() if self._queue else None
            if not self._queue:
                self._idle.set()


_writers: dict[asyncio.AbstractEventLoop, RunWriter] = {}


def run_writer() -> RunWriter:
    """The writer of the running event loop (one per worker process in production)."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None:
        writer = _writers[loop] = RunWriter(
            batch_size=settings.MORTAR_WRITER_BATCH_SIZE,
            interval=settings.MORTAR_WRITER_INTERVAL_MS / 1000,
        )
    return writer


async def close_run_writer() -> None:
    writer = _writers.pop(asyncio.get_running_loop(), None)
    if writer is not None:
        await writer.close()


def writer_status() -> dict[str, float | int]:
    """Queue depth and lag of this process's writers, for /readyz."""
    writers = list(_writers.values())
    return {
        "queue_depth": sum(w.depth for w in writers),
        "lag_seconds": round(max((w.lag_seconds for w in writers), default=0.0), 3),
    }
