"""Celery tasks of the run store: the retention purge, the day partitions created ahead, the
hourly usage rollups and the closing of a dead worker's runs.

Beat runs them (`CELERY_BEAT_SCHEDULE` in config/settings.py). Each takes simple arguments,
calls one service and is safe to run twice, or twice at once: the purge is idempotent, the
rollups recompute whole hours, a run is interrupted by one conditional update. A lost database
connection is retried a bounded number of times.
"""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

from telemetry.services.interruptions import runs_interrupt_orphaned
from telemetry.services.retention import runs_purge_expired
from telemetry.services.rollups import usage_rollups_catch_up
from telemetry.store.partitions import ensure_partitions_ahead

# A lost database connection is retried with backoff, a bounded number of times.
retried_task = shared_task(
    autoretry_for=(OperationalError, InterfaceError),
    max_retries=3,
    retry_backoff=5,
    retry_backoff_max=120,
    retry_jitter=True,
)


@retried_task
def purge_expired_runs(organization_id: int | None = None) -> dict[str, int]:
    """Delete expired runs and strip content retention forbids, for one or every organization."""
    organization_ids = None if organization_id is None else [organization_id]
    return runs_purge_expired(organization_ids=organization_ids).as_dict()


@retried_task
def ensure_run_partitions() -> list[str]:
    """Create the run store's day partitions from today to a week ahead (Postgres; idempotent)."""
    return ensure_partitions_ahead()


@retried_task
def rollup_usage(hours: int = 2) -> dict[str, int]:
    """Recompute the rollups of the hours touched in the last `hours`, or since the last run."""
    return usage_rollups_catch_up(hours=hours).as_dict()


@retried_task
def interrupt_orphaned_runs() -> int:
    """Close as interrupted the runs in progress of workers whose lease expired (they died)."""
    return len(runs_interrupt_orphaned())
