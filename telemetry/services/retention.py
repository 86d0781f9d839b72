"""Retention: delete runs past their organization's days, strip content `metadata` forbids.

Retention is per organization: `full`, `metadata` (no prompt or reply text; no replay) and a
number of days; Celery purges what has expired. The bodies of requests refused with a 400 are
kept 7 days for debugging, even under `metadata`.

Each statement touches at most `batch_size` rows, so purging a million runs never holds a huge
transaction or long locks; the batches are deliberately not one transaction. Every step is
idempotent, so a purge cut short (a lost database, a killed worker) is finished by the next.
Content the request path writes after a purge (a run still streaming) goes with the next one.

In Postgres the run and chunk tables are partitioned by day (`telemetry.store.partitions`): a
day that every organization's retention has passed goes whole first — its partitions detached
and dropped, which frees the disk at once and leaves autovacuum nothing to do — and the
DELETEs then take only what an organization with a shorter retention has left in the days
kept. SQLite (the embedded default) has no partitions and deletes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from accounts.models import Organization
from telemetry.models import Image, Run, RunChunk, RunImage
from telemetry.store.partitions import drop_partitions_before

logger = logging.getLogger(__name__)

BATCH_SIZE = 5000
# A request refused with a 400 keeps its body (and the error reply) this long, to debug the
# client's mistake.
REFUSED_BODY_DAYS = 7
# A run is never deleted while it may still be streaming: 0 days counts as 1.
MIN_RETENTION_DAYS = 1


@dataclass(frozen=True)
class PurgeCounts:
    runs_deleted: int = 0
    chunks_deleted: int = 0
    runs_stripped: int = 0
    images_deleted: int = 0
    # Day partitions dropped whole (Postgres), each table's counted: their rows are not counted
    # in `runs_deleted` and `chunks_deleted` (counting a day's rows would read them all).
    partitions_dropped: int = 0

    def __add__(self, other: PurgeCounts) -> PurgeCounts:
        return PurgeCounts(
            runs_deleted=self.runs_deleted + other.runs_deleted,
            chunks_deleted=self.chunks_deleted + other.chunks_deleted,
            runs_stripped=self.runs_stripped + other.runs_stripped,
            images_deleted=self.images_deleted + other.images_deleted,
            partitions_dropped=self.partitions_dropped + other.partitions_dropped,
        )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def runs_purge_expired(
    *,
    now: datetime | None = None,
    organization_ids: Iterable[int] | None = None,
    batch_size: int = BATCH_SIZE,
) -> PurgeCounts:
    """Purge every organization (or the given ones) as its retention says; return the counts.

    A purge of every organization first drops the day partitions all of them are done with."""
    now = now or timezone.now()
    organizations = Organization.objects.order_by("pk")
    total = PurgeCounts()
    if organization_ids is None:
        total += days_drop_expired(now=now)
    else:
        organizations = organizations.filter(pk__in=list(organization_ids))
    for organization in organizations:
        counts = organization_runs_purge(organization=organization, now=now, batch_size=batch_size)
        if counts != PurgeCounts():
            logger.info("retention purge of %r: %s", organization.name, counts.as_dict())
        total += counts
    return total


def days_drop_expired(*, now: datetime | None = None) -> PurgeCounts:
    """Drop the day partitions of the days every organization's retention has passed whole
    (Postgres; none on SQLite). A day with a run still in progress waits (see
    `drop_partitions_before`)."""
    now = now or timezone.now()
    days = [
        max(days, MIN_RETENTION_DAYS)
        for days in Organization.objects.values_list("retention_days", flat=True)
    ]
    if not days:
        return PurgeCounts()
    # Every run of a day before this one was accepted before every organization's cutoff.
    first_kept = (now - timedelta(days=max(days))).astimezone(UTC).date()
    dropped = drop_partitions_before(first_kept)
    return PurgeCounts(partitions_dropped=len(dropped))


def organization_runs_purge(
    *, organization: Organization, now: datetime | None = None, batch_size: int = BATCH_SIZE
) -> PurgeCounts:
    """Delete the organization's expired runs; under `metadata`, strip the rest of content."""
    now = now or timezone.now()
    days = max(organization.retention_days, MIN_RETENTION_DAYS)
    expired = Run.objects.filter(
        organization=organization, accepted_at__lt=now - timedelta(days=days)
    )
    counts = _runs_delete(runs=expired, batch_size=batch_size)
    if organization.retention == Organization.Retention.METADATA:
        counts += _runs_strip(organization=organization, now=now, batch_size=batch_size)
    return counts + _images_delete_unused(organization=organization, batch_size=batch_size)


def _runs_delete(*, runs: QuerySet[Run], batch_size: int) -> PurgeCounts:
    runs_deleted = chunks_deleted = 0
    for ids in _id_batches(runs, batch_size):
        chunks_deleted += _chunks_delete(run_ids=ids, batch_size=batch_size)
        # The chunks are gone, so the cascade finds none; only("pk") keeps the delete collector
        # from loading every request body into memory.
        _, per_model = Run.objects.filter(pk__in=ids).only("pk").delete()
        runs_deleted += per_model.get(Run._meta.label, 0)
        chunks_deleted += per_model.get(RunChunk._meta.label, 0)  # written since, if any
    return PurgeCounts(runs_deleted=runs_deleted, chunks_deleted=chunks_deleted)


def _runs_strip(*, organization: Organization, now: datetime, batch_size: int) -> PurgeCounts:
    """Drop the request bodies and chunks of a `metadata` organization's runs."""
    keeps_body = Q(
        status=Run.Status.REFUSED,
        http_status=400,
        accepted_at__gte=now - timedelta(days=REFUSED_BODY_DAYS),
    )
    has_chunks = Exists(RunChunk.objects.filter(run=OuterRef("pk")))
    runs = Run.objects.filter(organization=organization)
    with_content = runs.exclude(keeps_body).filter(
        Q(request_body__isnull=False) | Q(upstream_request__isnull=False) | has_chunks
    )
    runs_stripped = chunks_deleted = 0
    for ids in _id_batches(with_content, batch_size):
        chunks_deleted += _chunks_delete(run_ids=ids, batch_size=batch_size)
        RunImage.objects.filter(run_id__in=ids).delete()  # the images were part of the bodies
        runs_stripped += Run.objects.filter(pk__in=ids).update(
            request_body=None, upstream_request=None, prompt_text="", reply_text=""
        )
    # A refused request never reached a model server, but should one have a forwarded body,
    # only the body as received is kept for debugging.
    forwarded = runs.filter(keeps_body, upstream_request__isnull=False)
    for ids in _id_batches(forwarded, batch_size):
        runs_stripped += Run.objects.filter(pk__in=ids).update(upstream_request=None)
    return PurgeCounts(chunks_deleted=chunks_deleted, runs_stripped=runs_stripped)


def _images_delete_unused(*, organization: Organization, batch_size: int) -> PurgeCounts:
    """Delete the organization's images no run refers to any more (their runs were deleted or
    stripped), at most `batch_size` per statement.

    Each DELETE checks again that no run uses the image, so a link committed meanwhile keeps
    its image. A link the writer is committing at this very moment fails on the deleted image:
    its batch is written again, and stores the image anew.
    """
    unused = Image.objects.filter(organization=organization).exclude(
        Exists(RunImage.objects.filter(image=OuterRef("pk")))
    )
    deleted_total = 0
    while True:
        batch = list(unused.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not batch:
            return PurgeCounts(images_deleted=deleted_total)
        deleted, _ = unused.filter(pk__in=batch).delete()  # one DELETE: nothing cascades
        deleted_total += deleted


def _chunks_delete(*, run_ids: list[str], batch_size: int) -> int:
    """Delete the runs' chunks, at most `batch_size` rows per statement."""
    deleted_total = 0
    while True:
        batch = RunChunk.objects.filter(run_id__in=run_ids).order_by().values("pk")[:batch_size]
        deleted, _ = RunChunk.objects.filter(pk__in=batch).delete()
        deleted_total += deleted
        if deleted < batch_size:
            return deleted_total


def _id_batches(runs: QuerySet[Run], batch_size: int) -> Iterator[list[str]]:
    """Yield the runs' ids in key order, each batch read after the one before was handled.

    Walking the primary key (instead of re-reading the first rows each time) keeps a pass over
    a million runs linear even when a batch leaves its rows in place.
    """
    after = ""
    while True:
        ids = list(
            runs.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return
        yield ids
        after = ids[-1]
