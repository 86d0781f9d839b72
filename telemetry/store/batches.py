"""The run writer's batches: each written in one transaction — new runs, then chunks, then
outcomes, then the new runs' images — its rows by the database's own module (``postgres``: COPY;
``sqlite``: the ORM), and a batch the database refuses written again run by run.

Replayed batches (from the spool, or a dead writer's crash log) may already be in the database
(a commit whose acknowledgment was lost), so they are written idempotently: nothing is
duplicated and nothing already there fails them. A batch straight from the queue has never been
tried before, so its runs and chunks go straight in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import connection, transaction
from django.db.models import Count, OuterRef, Subquery

from core.db import DatabaseAway, drop_broken_connection
from telemetry.models import Run, RunChunk
from telemetry.store import postgres, sqlite
from telemetry.store.fields import RunFields
from telemetry.store.images import RunImages, fields_with_references, hashed, run_images_write
from telemetry.store.items import ChunkSent, RunOpened, WriterItem
from telemetry.store.run_locks import runs_lock
from telemetry.store.search_text import prompt_text

logger = logging.getLogger(__name__)


def _with_prompt_text(fields: RunFields) -> RunFields:
    """The run's fields with the text of its request's messages, for the dashboard's search.

    Computed here, on the writer's thread, once per run: never on the event loop, never per
    chunk. A run stored without its body (`metadata` retention) has none.
    """
    body = fields.get("request_body")
    if not body or "prompt_text" in fields:
        return fields
    return {**fields, "prompt_text": prompt_text(body)}


def write_batch(items: Sequence[WriterItem], *, replay: bool = False) -> None:
    """Write one batch in one transaction: new runs, then chunks, then run updates, then the
    new runs' images.

    `replay` says the batch may be in the database already, wholly or in part; it is then
    written so that nothing is duplicated and nothing already there fails it.
    """
    new_runs: dict[str, RunFields] = {}
    updates: dict[str, RunFields] = {}
    chunks: list[ChunkSent] = []
    images: list[RunImages] = []
    # The items' own dicts are used as they are, never changed: a batch that fails is tried
    # again, or spooled, as it came. Merging two makes a new dict.
    for item in items:
        if isinstance(item, ChunkSent):
            chunks.append(item)
        elif isinstance(item, RunOpened):
            fields = _with_prompt_text(item.fields)
            if item.images:
                # The bodies name each image instead of repeating its bytes.
                seen = hashed(item.images)
                fields = fields_with_references(fields, seen)
                images.append(
                    RunImages(fields["id"], fields["organization_id"], fields["accepted_at"], seen)
                )
            new_runs[fields["id"]] = fields
        elif item.run_id in new_runs and not replay:
            # Opened and closed within one batch: one insert. Not on replay, where the insert
            # may be skipped as a conflict and would take the outcome with it.
            new_runs[item.run_id] = {**new_runs[item.run_id], **item.fields}
        elif item.run_id in updates:
            updates[item.run_id] = {**updates[item.run_id], **item.fields}
        else:
            updates[item.run_id] = item.fields

    with transaction.atomic():
        if replay and chunks:
            # As a sweep closing one as interrupted does: it counts their chunks before these or
            # after their commit, never between.
            runs_lock({run_id for run_id, *_ in chunks})
        # Postgres COPYs the rows in; SQLite, the embedded default, takes them through the ORM.
        write_rows = postgres.write_rows if connection.vendor == "postgresql" else sqlite.write_rows
        write_rows(new_runs=new_runs, chunks=chunks, updates=updates, replay=replay)
        if images:  # after their runs, whose rows they point at
            run_images_write(images)
        if replay and chunks:
            _interrupted_runs_recounted({run_id for run_id, *_ in chunks})


def _interrupted_runs_recounted(run_ids: set[str]) -> None:
    """Count again the chunks of the runs closed as interrupted: a live worker closed them with
    the chunks stored then, and a dead writer's log, claimed later (`telemetry.store.chunklog`),
    may hold more that its clients received. Only on replay, a rare path."""
    Run.objects.filter(pk__in=run_ids, status=Run.Status.INTERRUPTED).update(
        chunk_count=Subquery(
            RunChunk.objects.filter(run_id=OuterRef("pk"))
            .values("run_id")
            .annotate(stored=Count("*"))
            .values("stored")
        )
    )


def database_reachable() -> bool:
    """Whether this thread's connection (re)connects and answers."""
    try:
        drop_broken_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseAway:
        return False
    return True


def write_runs_one_by_one(items: Sequence[WriterItem]) -> None:
    """Write each run's rows in a transaction of their own; log and drop a run that fails.

    Raises if the database goes away meanwhile, so the caller keeps the whole batch (runs
    already written are written again idempotently).
    """
    by_run: dict[str, list[WriterItem]] = {}
    for item in items:
        run_id = item.fields["id"] if isinstance(item, RunOpened) else item.run_id
        by_run.setdefault(run_id, []).append(item)
    for run_id, rows in by_run.items():
        try:
            write_batch(rows, replay=True)
        except DatabaseAway:
            if not database_reachable():
                raise
            logger.exception("run writer: dropped %d rows of run %s", len(rows), run_id)
        except Exception:
            logger.exception("run writer: dropped %d rows of run %s", len(rows), run_id)
