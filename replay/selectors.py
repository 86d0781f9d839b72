"""Reads for replay: the stored run and its chunks, scoped to an organization.

Each runs on a worker thread through `core.db`, on a connection that works: the API is served
without Django's request handler, so nothing closes a connection a Postgres restart has cut
(`core.db` drops it and reads again on a new one).

With a streaming replica configured (`core.db_routing`), a finished run is read from the replica
when the replica has it finished too; a run still in progress there, or not there yet, is read
from the primary, and so are its chunks. Replication applies the writer's transactions in their
order, so a replica that has a run's outcome has all of its chunks.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from asgiref.sync import sync_to_async
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Organization
from core.db import database_read
from core.db_routing import PRIMARY, read_on, read_replica_first
from telemetry.models import Run, RunChunk


async def replayable_run(run_id: str, organization: Organization) -> Run | None:
    """The run, if this organization may replay it: its own, within retention, with content."""
    if organization.retention != Organization.Retention.FULL:
        return None
    run = await database_read(
        lambda: read_replica_first(
            lambda alias: (
                Run.objects.using(alias).filter(pk=run_id, organization=organization).first()
            ),
            good_enough=_finished,
        )
    )
    if run is None:
        return None
    if run.accepted_at < timezone.now() - timedelta(days=organization.retention_days):
        return None
    return run


async def stored_run(run_id: str) -> Run | None:
    """The run, whichever organization's (the dashboard checks who may see it). On the
    request's own thread and connection: the dashboard is served by Django's handler, which
    closes it when the request ends."""
    return await sync_to_async(
        lambda: read_replica_first(
            lambda alias: Run.objects.using(alias).filter(pk=run_id).first(),
            good_enough=_finished,
        )
    )()


def _finished(run: Run | None) -> bool:
    return run is not None and run.status != Run.Status.IN_PROGRESS


def read_from(run: Run) -> str:
    """The database `run` was read from: its chunks are read there too."""
    return run._state.db or PRIMARY


def chunks_of(
    run_id: str, accepted_at: datetime | None, *, using: str = PRIMARY
) -> QuerySet[RunChunk]:
    """The run's chunks; with its acceptance time, Postgres reads the one partition they are in
    (`telemetry.store.partitions`) instead of probing every day's."""
    chunks = RunChunk.objects.using(using).filter(run_id=run_id)
    return chunks if accepted_at is None else chunks.filter(run_accepted_at=accepted_at)


async def chunks_after(
    run_id: str,
    seq: int,
    limit: int = 500,
    *,
    accepted_at: datetime | None = None,
    using: str = PRIMARY,
) -> list[RunChunk]:
    return await database_read(
        lambda: read_on(
            using,
            lambda alias: list(
                chunks_of(run_id, accepted_at, using=alias)
                .filter(seq__gt=seq)
                .order_by("seq")
                .only("seq", "offset_us", "data")[:limit]
            ),
        )
    )


async def run_status(run_id: str, *, accepted_at: datetime | None = None) -> str | None:
    runs = Run.objects.filter(pk=run_id)
    if accepted_at is not None:
        runs = runs.filter(accepted_at=accepted_at)  # one partition
    return await database_read(lambda: runs.values_list("status", flat=True).first())
