"""The batch writes of each database (`telemetry.store.postgres`, `telemetry.store.sqlite`) store
the same rows for the same batch, written once or replayed.

Both modules write into the same Postgres database here: the SQLite one is plain ORM writes,
which run on either, so what each stores is compared row for row in one run.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

from telemetry.models import Run, RunChunk
from telemetry.store import postgres, sqlite
from telemetry.store.items import ChunkSent
from tests.conftest import Tenant
from tests.telemetry.store.test_writer_values import closed_fields, opened_fields

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

WriteRows = Callable[..., None]
MODULES: tuple[WriteRows, WriteRows] = (postgres.write_rows, sqlite.write_rows)


def write(
    write_rows: WriteRows,
    *,
    new_runs: dict[str, dict[str, Any]] | None = None,
    chunks: list[ChunkSent] | None = None,
    updates: dict[str, dict[str, Any]] | None = None,
    replay: bool = False,
) -> None:
    """Write rows as `write_batch` hands them on: sorted, in the batch's transaction."""
    with transaction.atomic():
        write_rows(
            new_runs=new_runs or {},
            chunks=chunks or [],
            updates=updates or {},
            replay=replay,
        )


def opened(tenant: Tenant, run_id: str) -> dict[str, Any]:
    # Text with NUL, which Postgres text cannot hold, beside the bytes that keep theirs.
    return {**opened_fields(tenant, run_id), "end_user": "a\x00b"}


def closed(*, overlong: bool = False) -> dict[str, Any]:
    """An outcome with NUL in a text; `overlong`: and a text longer than its column, which is cut
    to fit only in an outcome written after its run's insert."""
    fields = {**closed_fields(), "error_code": "c\x00d"}
    return {**fields, "finish_reason": "x" * 40} if overlong else fields


def sent(run_id: str, count: int) -> list[ChunkSent]:
    return [ChunkSent(run_id, seq, seq * 1000, b"data: \x00%d\n\n" % seq) for seq in range(count)]


def stored(run_id: str) -> tuple[dict[str, Any], list[tuple[int, int, bytes]]]:
    """The run's row and its chunks, without its id (each module writes runs of its own)."""
    run = Run.objects.filter(pk=run_id).values().get()
    run.pop("id")
    for name in ("request_body", "upstream_request"):
        if run[name] is not None:
            run[name] = bytes(run[name])
    chunks = [
        (seq, offset_us, bytes(data))
        for seq, offset_us, data in RunChunk.objects.filter(run_id=run_id)
        .order_by("seq")
        .values_list("seq", "offset_us", "data")
    ]
    return run, chunks


def new_run_id() -> str:
    return f"chatcmpl-{secrets.token_hex(12)}"


def test_a_run_opened_and_closed_in_one_batch_is_stored_alike(tenant: Tenant) -> None:
    results = []
    for write_rows in MODULES:
        run_id = new_run_id()
        # One insert: `write_batch` merges a run opened and closed in the same fresh batch.
        write(
            write_rows,
            new_runs={run_id: {**opened(tenant, run_id), **closed()}},
            chunks=sent(run_id, 3),
        )
        results.append(stored(run_id))
    by_postgres, by_sqlite = results
    assert by_postgres == by_sqlite
    run, chunks = by_postgres
    assert (run["end_user"], run["error_code"]) == ("ab", "cd")
    assert [seq for seq, _, _ in chunks] == [0, 1, 2]


def test_an_outcome_in_a_later_batch_is_stored_alike(tenant: Tenant) -> None:
    results = []
    for write_rows in MODULES:
        run_id = new_run_id()
        write(write_rows, new_runs={run_id: opened(tenant, run_id)}, chunks=sent(run_id, 2))
        write(write_rows, updates={run_id: closed(overlong=True)})
        results.append(stored(run_id))
    assert results[0] == results[1]
    run, _ = results[0]
    assert (run["status"], run["finish_reason"]) == (Run.Status.COMPLETED, "x" * 32)


def test_a_replayed_batch_written_twice_stores_the_same_rows_once(tenant: Tenant) -> None:
    """The first try committed the open and part of the chunks, but its acknowledgment was lost;
    the batch is then replayed whole, twice (a writer that died before deleting its spool file),
    and each module ends with what one clean write stores."""
    results = []
    for write_rows in MODULES:
        run_id, clean_id = new_run_id(), new_run_id()
        write(write_rows, new_runs={run_id: opened(tenant, run_id)}, chunks=sent(run_id, 2))
        for _ in range(2):
            write(
                write_rows,
                new_runs={run_id: opened(tenant, run_id)},
                chunks=sent(run_id, 5),
                updates={run_id: closed(overlong=True)},
                replay=True,
            )
        write(write_rows, new_runs={clean_id: opened(tenant, clean_id)}, chunks=sent(clean_id, 5))
        write(write_rows, updates={clean_id: closed(overlong=True)})
        assert stored(run_id) == stored(clean_id)
        results.append(stored(run_id))
    assert results[0] == results[1]
    run, chunks = results[0]
    assert run["status"] == Run.Status.COMPLETED
    assert [seq for seq, _, _ in chunks] == [0, 1, 2, 3, 4]
