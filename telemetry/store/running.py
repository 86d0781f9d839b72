"""This process's run writers, one per event loop: the one the request path submits to
(``run_writer()``), started and closed with the ASGI app, and their status for /readyz."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from core.loops import PerLoop
from telemetry.store.writer import RunWriter


def _new_run_writer() -> RunWriter:
    return RunWriter(
        batch_size=settings.MORTAR_WRITER_BATCH_SIZE,
        interval=settings.MORTAR_WRITER_INTERVAL_MS / 1000,
    )


# The writer of the running event loop (one per worker process in production).
run_writer = PerLoop(_new_run_writer)


def start_run_writer() -> None:
    """Start this loop's writer now (at ASGI startup), so leftover spool files drain early."""
    run_writer().start()


async def close_run_writer() -> None:
    writer = run_writer.pop()
    if writer is not None:
        await writer.close()


def writer_status() -> dict[str, Any]:
    """Queue depth, lag, spooled rows, rows ever spilled to the spool (behind or with the database
    away) and the last database error of this process's writers."""
    writers = run_writer.instances()
    errors = [(w.last_error_at, w.last_error) for w in writers if w.last_error_at is not None]
    last_error = None
    if errors:
        at, message = max(errors)
        last_error = {"message": message, "at": at.isoformat()}
    return {
        "queue_depth": sum(w.depth for w in writers),
        "lag_seconds": round(max((w.lag_seconds for w in writers), default=0.0), 3),
        "spooled": sum(w.spooled for w in writers),
        "spilled_total": sum(w.spilled_total for w in writers),
        "last_error": last_error,
    }
