"""Record one run as it happens: its row, and every chunk exactly as it was sent."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from telemetry.models import Run
from telemetry.writer import ChunkSent, RunClosed, RunOpened, RunWriter


class RunRecorder:
    """Collects a run's fields and chunks and hands them to the run writer, never blocking."""

    def __init__(self, *, run_id: str, accepted_at: datetime, writer: RunWriter):
        self.run_id = run_id
        self.accepted_at = accepted_at
        self._started = time.perf_counter()
        self._writer = writer
        self._fields: dict[str, Any] = {"id": run_id, "accepted_at": accepted_at}
        self._opened = False
        self._late_fields: dict[str, Any] = {}
        self._closed = False
        self._seq = 0
        self.first_token_at: datetime | None = None

    def set(self, **fields: Any) -> None:
        """Note fields of the run; once it is open they are written with its outcome."""
        if self._opened:
            self._late_fields.update(fields)
        else:
            self._fields.update(fields)

    def _now(self) -> tuple[int, datetime]:
        elapsed_us = int((time.perf_counter() - self._started) * 1_000_000)
        return elapsed_us, self.accepted_at + timedelta(microseconds=elapsed_us)

    def open(self, **fields: Any) -> None:
        """Write the run as in progress, before its first chunk."""
        self._fields.update(fields, status=Run.Status.IN_PROGRESS)
        self._writer.submit(RunOpened(dict(self._fields)))
        self._opened = True

    def chunk(self, data: bytes) -> None:
        offset_us, _ = self._now()
        self._writer.submit(ChunkSent(self.run_id, self._seq, offset_us, data))
        self._seq += 1

    def mark_first_token(self) -> None:
        if self.first_token_at is None:
            _, self.first_token_at = self._now()

    def close(self, *, status: str, **fields: Any) -> None:
        """Write the run's outcome; only the first close counts."""
        if self._closed:
            return
        self._closed = True
        _, finished_at = self._now()
        outcome = {
            **self._late_fields,
            **fields,
            "status": status,
            "finished_at": finished_at,
            "first_token_at": self.first_token_at,
            "chunk_count": self._seq,
        }
        if self._opened:
            self._writer.submit(RunClosed(self.run_id, outcome))
        else:
            self._fields.update(outcome)
            self._writer.submit(RunOpened(dict(self._fields)))
