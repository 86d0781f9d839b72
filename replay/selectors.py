"""Reads for replay: the stored run and its chunks, scoped to an organization.

Each runs on a worker thread through `core.db`, on a connection that works: the API is served
without Django's request handler, so nothing closes a connection a Postgres restart has cut
(`core.db` drops it and reads again on a new one).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Organization
from core.db import database_read
from telemetry.models import Run, RunChunk


async def replayable_run(run_id: str, organization: Organization) -> Run | None:
    """The run, if this organization may replay it: its own, within retention, with content."""
    if organization.retention != Organization.Retention.FULL:
        return None
    run = await database_read(
        lambda: Run.objects.filter(pk=run_id, organization=organization).first()
    )
    if run is None:
        return None
    if run.accepted_at < timezone.now() - timedelta(days=organization.retention_days):
        return None
    return run


def chunks_of(run_id: str, accepted_at: datetime | None) -> QuerySet[RunChunk]:
    """The run's chunks; with its acceptance time, Postgres reads the one partition they are in
    (`telemetry.store.partitions`) instead of probing every day's."""
    chunks = RunChunk.objects.filter(run_id=run_id)
    return chunks if accepted_at is None else chunks.filter(run_accepted_at=accepted_at)


async def chunks_after(
    run_id: str, seq: int, limit: int = 500, *, accepted_at: datetime | None = None
) -> list[RunChunk]:
    return await database_read(
        lambda: list(
            chunks_of(run_id, accepted_at)
            .filter(seq__gt=seq)
            .order_by("seq")
            .only("seq", "offset_us", "data")[:limit]
        )
    )


async def run_status(run_id: str, *, accepted_at: datetime | None = None) -> str | None:
    runs = Run.objects.filter(pk=run_id)
    if accepted_at is not None:
        runs = runs.filter(accepted_at=accepted_at)  # one partition
    return await database_read(lambda: runs.values_list("status", flat=True).first())
