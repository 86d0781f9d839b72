"""The run writer's batches in SQLite, the embedded default: plain ORM writes, conflicts ignored
(so a replayed batch needs nothing more), inside the batch's transaction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError

from telemetry.models import Run, RunChunk
from telemetry.store.fields import RunFields
from telemetry.store.items import ChunkSent


def write_rows(
    *,
    new_runs: dict[str, RunFields],
    chunks: list[ChunkSent],
    updates: dict[str, RunFields],
    replay: bool,
) -> None:
    """Write new runs (by id), then chunks, then outcomes (run id → fields), in the caller's
    transaction; on `replay`, chunks already stored are left out."""
    accepted = _runs_accepted_at(chunks, opened=new_runs)
    Run.objects.bulk_create(
        [Run(**_text_safe(fields)) for fields in new_runs.values()],
        ignore_conflicts=True,
    )
    if replay and chunks:
        chunks = _not_stored(chunks)
    RunChunk.objects.bulk_create(
        [
            RunChunk(run_id=r, run_accepted_at=accepted[r], seq=s, offset_us=o, data=d)
            for r, s, o, d in chunks
        ],
        batch_size=500,
        ignore_conflicts=True,
    )
    for run_id, fields in updates.items():
        Run.objects.filter(pk=run_id).update(**_cut_to_fit(_text_safe(fields)))


def _not_stored(chunks: list[ChunkSent]) -> list[ChunkSent]:
    """A replayed batch's chunks less those stored already. SQLite's key on the chunk table would
    skip them too, but Postgres's chunk table keeps no unique index (telemetry migration 0022),
    and this module writes there in the tests that compare the two."""
    stored = set(
        RunChunk.objects.filter(run_id__in={chunk.run_id for chunk in chunks}).values_list(
            "run_id", "seq"
        )
    )
    fresh: dict[tuple[str, int], ChunkSent] = {}
    for chunk in chunks:
        if (chunk.run_id, chunk.seq) not in stored:
            fresh.setdefault((chunk.run_id, chunk.seq), chunk)
    return list(fresh.values())


def _text_safe(fields: RunFields) -> dict[str, Any]:
    """Postgres text cannot hold NUL; drop it from text fields (bytes fields keep theirs)."""
    return {
        key: value.replace("\x00", "") if isinstance(value, str) else value
        for key, value in fields.items()
    }


def _cut_to_fit(fields: dict[str, Any]) -> dict[str, Any]:
    """Cut outcome text to its column's length, as Postgres' outcome UPDATE does (its cast to
    varchar(n) truncates); SQLite would keep it whole."""
    fitted = dict(fields)
    for key, value in fields.items():
        max_length = getattr(Run._meta.get_field(key), "max_length", None)
        if isinstance(value, str) and max_length is not None and len(value) > max_length:
            fitted[key] = value[:max_length]
    return fitted


def _runs_accepted_at(
    chunks: list[ChunkSent], *, opened: Mapping[str, RunFields]
) -> dict[str, Any]:
    """The acceptance time of each chunk's run, which the chunk row carries.

    Refuses the batch if a chunk's run is neither in it nor stored, as the database's check
    does in Postgres (telemetry migration 0019): the batch is then written run by run, and such
    a run's chunks dropped, not stored where nothing would ever read or purge them."""
    named = {chunk.run_id for chunk in chunks}
    accepted = {run_id: opened[run_id]["accepted_at"] for run_id in named if run_id in opened}
    earlier = named.difference(accepted)
    accepted.update(Run.objects.filter(pk__in=earlier).values_list("pk", "accepted_at"))
    missing = named.difference(accepted)
    if missing:
        raise IntegrityError(f"a chunk's run is not stored: {min(missing)}")
    return accepted
