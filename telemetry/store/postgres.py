"""The run writer's batches in Postgres: runs and chunks COPYed in binary, outcomes UPDATEd.

The writer's thread shares one CPU with the gateway's event loop, so its client-side cost per
row is kept low, without changing what is stored:

- Runs and chunks are COPYed in binary, several times faster than INSERTs compiled by the ORM;
  a run's values are those the ORM would store (``telemetry.store.run_table``).
- Outcomes (fields of runs opened in an earlier batch) are applied by one UPDATE per set of
  field names whose text does not depend on how many runs there are (``RunTable.update_sql``).
  psycopg converts that text once and prepares it, where a multi-row ``VALUES`` list was
  re-parsed every batch.
- COPY cannot skip conflicts, so a replayed batch (which may be in the database already) is
  first tried the same way inside a savepoint — most replayed rows were never written — and
  only when that meets a row already there is it COPYed into a temporary table and inserted
  from there with ON CONFLICT DO NOTHING. Replayed chunks always go through the temporary
  table, inserted where no chunk of the same run and sequence is stored (the chunk table has
  no unique index, see ``_copy_chunks``). The temporary table is dropped at once (a rollback
  drops it too), so even a batch written inside an outer transaction leaves nothing behind.
  Outcome UPDATEs are idempotent by nature.
- The run and chunk tables are partitioned by the run's acceptance time
  (``telemetry.store.partitions``): a chunk row carries its run's ``accepted_at``, and an
  outcome's UPDATE names it too, so Postgres touches the one partition where the run is
  (``telemetry.store.accepted_times``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
import psycopg
from django.db import IntegrityError, connection, transaction
from psycopg.types.json import Jsonb
from psycopg.types.string import BytesBinaryDumper

from telemetry.models import RunChunk
from telemetry.store.accepted_times import AcceptedTimes
from telemetry.store.fields import RunFields
from telemetry.store.items import Chunk, ChunkSent
from telemetry.store.run_table import run_table

# In the table's own column order (migration 0022).
CHUNK_COLUMNS = "run_accepted_at, offset_us, seq, run_id, data"
CHUNK_TYPES = ["timestamptz", "int8", "int4", "text", "bytea"]

# The acceptance times of the runs this process's writer stored: their partitions.
_ACCEPTED = AcceptedTimes()


def write_rows(
    *,
    new_runs: dict[str, RunFields],
    chunks: list[ChunkSent],
    updates: dict[str, RunFields],
    replay: bool,
) -> None:
    """Write new runs (by id), then chunks, then outcomes, in the caller's transaction."""
    # Raw psycopg calls, wrapped so their errors become Django's (and mark the connection as
    # having failed, for `drop_broken_connection`).
    with connection.wrap_database_errors:
        # The runs' budget draws are taken by the inserts themselves (the billing app's
        # trigger on the run table), not by statements of their own: a draw with its run's
        # first insert, never again on a replay. Their charges are settled by their workers.
        write(
            connection.connection,
            new_runs=list(new_runs.values()),
            chunks=chunks,
            updates=updates,
            replay=replay,
        )


def write(
    pg_connection: psycopg.Connection[Any],
    *,
    new_runs: Sequence[RunFields],
    chunks: Sequence[Chunk],
    updates: dict[str, RunFields],
    replay: bool,
) -> None:
    """Write new runs, then chunks, then outcomes (run id → fields), in the caller's transaction."""
    # A cursor that binds parameters on the server (Django's binds them into the query text),
    # so the constant UPDATEs are converted once and prepared.
    with psycopg.Cursor(pg_connection) as cursor:
        # bytea by type, as COPY asks for it, with psycopg's C dumper: Django's connection has
        # one in Python (it unwraps dbapi Binary, never passed here) that costs a third of a
        # chunk row's COPY.
        cursor.adapters.register_dumper(bytes, BytesBinaryDumper)
        accepted = _ACCEPTED.of(cursor, new_runs, chunks, updates)
        if new_runs:
            _copy_runs(cursor, new_runs, replay=replay)
        if chunks:
            _copy_chunks(cursor, chunks, accepted, replay=replay)
        if updates:
            _update_runs(cursor, updates, accepted)
        _ACCEPTED.forget(new_runs, updates)


def _copy_runs(cursor: psycopg.Cursor[Any], runs: Sequence[RunFields], *, replay: bool) -> None:
    table = run_table()
    rows = [table.row(fields) for fields in runs]
    if not replay:
        _copy(cursor, table.name, table.column_list, rows, table.copy_types)
        return
    _copy_skipping_conflicts(
        cursor,
        rows,
        table=table.name,
        columns=table.column_list,
        temporary=("mortar_replayed_run", f"(LIKE {table.name})"),
        conflict="(id, accepted_at)",
        types=table.copy_types,
    )


def _copy_chunks(
    cursor: psycopg.Cursor[Any],
    chunks: Sequence[Chunk],
    accepted: dict[str, datetime],
    *,
    replay: bool,
) -> None:
    table = connection.ops.quote_name(RunChunk._meta.db_table)
    try:
        rows = [
            (accepted[run_id], offset_us, seq, run_id, data)
            for run_id, seq, offset_us, data in chunks
        ]
    except KeyError as missing:
        # As the chunk table's trigger refuses them (migration 0019): the batch is then
        # written run by run, and this run's chunks dropped.
        raise IntegrityError(f"a chunk's run is not stored: {missing.args[0]}") from None
    if not replay:
        _copy(cursor, table, CHUNK_COLUMNS, rows, CHUNK_TYPES)
        return
    # The chunk table has no unique index to meet a conflict on (its index of runs holds each
    # run once, deduplicated: migration 0022), so a replayed batch always leaves out, by
    # lookup, the chunks already stored. The batch holds its runs' locks (`runs_lock`), so no
    # other replay of the same runs stores one in between.
    cursor.execute(
        "CREATE TEMP TABLE mortar_replayed_chunk"
        " (run_accepted_at timestamptz, offset_us int8, seq int4, run_id text, data bytea)"
    )
    _copy(cursor, "mortar_replayed_chunk", CHUNK_COLUMNS, rows, CHUNK_TYPES)
    replayed = ", ".join(f"t.{column}" for column in CHUNK_COLUMNS.split(", "))
    cursor.execute(
        f"INSERT INTO {table} ({CHUNK_COLUMNS})"
        f" SELECT DISTINCT ON (t.run_id, t.seq) {replayed}"
        " FROM mortar_replayed_chunk t"
        f" WHERE NOT EXISTS (SELECT 1 FROM {table} c WHERE c.run_id = t.run_id"
        " AND c.run_accepted_at = t.run_accepted_at AND c.seq = t.seq)"
    )
    cursor.execute("DROP TABLE mortar_replayed_chunk")


def _copy_skipping_conflicts(
    cursor: psycopg.Cursor[Any],
    rows: Sequence[Sequence[Any]],
    *,
    table: str,
    columns: str,
    temporary: tuple[str, str],
    conflict: str,
    types: list[str],
) -> None:
    """COPY rows into `table`, leaving out those already there (by the `conflict` key)."""
    try:
        with transaction.atomic():  # a savepoint
            _copy(cursor, table, columns, rows, types)
        return
    except psycopg.errors.UniqueViolation:
        pass  # some rows are in already: the batch's first try did commit
    name, definition = temporary
    cursor.execute(f"CREATE TEMP TABLE {name} {definition}")
    _copy(cursor, name, columns, rows, types)
    cursor.execute(
        f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {name}"
        f" ON CONFLICT {conflict} DO NOTHING"
    )
    cursor.execute(f"DROP TABLE {name}")


def _copy(
    cursor: psycopg.Cursor[Any],
    table: str,
    columns: str,
    rows: Sequence[Sequence[Any]],
    types: list[str],
) -> None:
    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def _update_runs(
    cursor: psycopg.Cursor[Any], updates: dict[str, RunFields], accepted: dict[str, datetime]
) -> None:
    """Apply outcomes: one UPDATE per set of field names (usually just one). An outcome of a
    run not stored updates nothing, as an UPDATE that finds no row."""
    table = run_table()
    by_names: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for run_id, fields in updates.items():
        accepted_at = accepted.get(run_id)
        if accepted_at is None:
            continue
        row: dict[str, Any] = {"id": run_id, "accepted_at": accepted_at}
        for name, value in fields.items():
            column = table.outcome_column(name)
            value = column.prepare(value)
            row[column.name] = None if value is None else column.kind.to_json(value)
        by_names.setdefault(tuple(sorted(fields)), []).append(row)
    for names, rows in by_names.items():
        cursor.execute(table.update_sql(names), [Jsonb(rows, dumps=orjson.dumps)])
