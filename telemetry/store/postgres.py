"""The run writer's batches in Postgres: runs and chunks COPYed in binary, outcomes UPDATEd.

The writer's thread shares one CPU with the gateway's event loop, so its client-side cost per
row is kept low, without changing what is stored:

- Runs and chunks are COPYed in binary, several times faster than INSERTs compiled by the ORM,
  with every column's type fixed up front so psycopg dumps whole rows in C. A run's row starts
  from the model's defaults; a value goes through Django's field preparation only when it is
  not already of the column's plain Python type (what the ORM would store is stored).
- Outcomes (fields of runs opened in an earlier batch) are applied by one UPDATE per set of
  field names whose text does not depend on how many runs there are: the rows travel as one
  jsonb parameter, spread into typed columns by ``jsonb_to_recordset``. psycopg converts that
  text once and prepares it, where a multi-row ``VALUES`` list was re-parsed every batch.
- JSON is encoded with orjson, or by ``json.dumps`` (as the ORM does) when orjson refuses a
  value (keys that are not strings, integers beyond 64 bits).
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
  outcome's UPDATE names it too, so Postgres touches the one partition where the run is. The
  writer knows it from the runs it stored (``_AcceptedTimes``), and asks the database for a
  run it did not store itself (a dead worker's rows, replayed).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson
import psycopg
from django.db import IntegrityError, connection, transaction
from django.db.models import NOT_PROVIDED, Field, ForeignKey
from psycopg.types.json import Jsonb
from psycopg.types.string import BytesBinaryDumper

from telemetry.models import Run, RunChunk
from telemetry.store.fields import RunFields
from telemetry.store.items import ChunkSent

# In the table's own column order (migration 0022).
CHUNK_COLUMNS = "run_accepted_at, offset_us, seq, run_id, data"
CHUNK_TYPES = ["timestamptz", "int8", "int4", "text", "bytea"]

Chunk = tuple[str, int, int, bytes]  # run id, seq, offset µs, data: a `ChunkSent`


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


class _AcceptedTimes:
    """The acceptance times of the runs this process's writer stored and has not closed: a run's
    later chunks and outcome name its partition with it. Only a shortcut: a run it does not
    know is looked up (one query for a batch's unknown runs)."""

    # Bounded: runs left open forever (a client gone, its close lost) must not grow it.
    LIMIT = 50_000

    def __init__(self) -> None:
        self._times: dict[str, datetime] = {}

    def of(
        self,
        cursor: psycopg.Cursor[Any],
        new_runs: Sequence[RunFields],
        chunks: Sequence[Chunk],
        updates: dict[str, RunFields],
    ) -> dict[str, datetime]:
        """The acceptance time of every run the batch names; a run not stored has none."""
        accepted = self._times
        if len(accepted) + len(new_runs) > self.LIMIT:
            accepted.clear()
        column = _run_table().accepted_at
        for fields in new_runs:
            accepted[fields["id"]] = column.prepare(fields["accepted_at"])
        unknown = {chunk[0] for chunk in chunks}.difference(accepted)
        unknown.update(run_id for run_id in updates if run_id not in accepted)
        if unknown:
            cursor.execute(
                f"SELECT id, accepted_at FROM {_run_table().name} WHERE id = ANY(%s)",
                [list(unknown)],
            )
            accepted.update(cursor.fetchall())
        return accepted

    def forget(self, new_runs: Sequence[RunFields], updates: dict[str, RunFields]) -> None:
        """Forget the runs stored closed or closed now: nothing more of theirs comes."""
        closed = [fields["id"] for fields in new_runs if _closes(fields)]
        closed.extend(run_id for run_id, fields in updates.items() if _closes(fields))
        for run_id in closed:
            self._times.pop(run_id, None)


def _closes(fields: RunFields) -> bool:
    return fields.get("status", Run.Status.IN_PROGRESS) != Run.Status.IN_PROGRESS


_ACCEPTED = _AcceptedTimes()


def json_dumps(value: Any) -> bytes:
    """JSON for a jsonb column: orjson, or json.dumps (the ORM's encoder) for what it refuses."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value).encode()


# How each kind of Run field is sent: its type for binary COPY, a check that a value can be sent
# as it is (else Django's field preparation makes it so), and its form in the outcomes' JSON.


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_bool(value: Any) -> bool:
    return type(value) is bool


def _is_aware_datetime(value: Any) -> bool:
    return type(value) is datetime and value.tzinfo is not None


def _is_finite_decimal(value: Any) -> bool:
    return type(value) is Decimal and value.is_finite()


def _is_bytes(value: Any) -> bool:
    return type(value) is bytes


def _is_anything(value: Any) -> bool:
    return True


def _as_is(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class _Kind:
    copy_type: str
    plain: Callable[[Any], bool]
    to_json: Callable[[Any], Any] = _as_is
    # The one type whose values are always plain for this kind (`plain` true), if there is one:
    # `_RunTable.row` sends those as they are without a call per value.
    plain_type: type | None = None


_KINDS = {
    "text": _Kind("text", _is_str, plain_type=str),
    "bool": _Kind("bool", _is_bool, plain_type=bool),
    "int2": _Kind("int2", _is_int, plain_type=int),
    "int4": _Kind("int4", _is_int, plain_type=int),
    "int8": _Kind("int8", _is_int, plain_type=int),
    "timestamptz": _Kind("timestamptz", _is_aware_datetime),  # orjson writes ISO 8601
    "numeric": _Kind("numeric", _is_finite_decimal, str),
    "bytea": _Kind("bytea", _is_bytes, lambda value: "\\x" + value.hex(), plain_type=bytes),
    "jsonb": _Kind("jsonb", _is_anything, lambda value: orjson.Fragment(json_dumps(value))),
}
_KIND_OF_FIELD = {
    "AutoField": "int4",
    "BigAutoField": "int8",
    "BigIntegerField": "int8",
    "BinaryField": "bytea",
    "BooleanField": "bool",
    "CharField": "text",
    "DateTimeField": "timestamptz",
    "DecimalField": "numeric",
    "IntegerField": "int4",
    "JSONField": "jsonb",
    "PositiveBigIntegerField": "int8",
    "PositiveIntegerField": "int4",
    "PositiveSmallIntegerField": "int2",
    "SmallIntegerField": "int2",
    "TextField": "text",
}


def _field_kind(field: Field[Any, Any]) -> _Kind:
    internal_type = field.get_internal_type()
    if isinstance(field, ForeignKey):
        internal_type = field.target_field.get_internal_type()
    try:
        return _KINDS[_KIND_OF_FIELD[internal_type]]
    except KeyError:
        raise NotImplementedError(f"the run writer cannot send a {internal_type}") from None


def _column_name(field: Field[Any, Any]) -> str:
    assert field.column is not None  # the run table's concrete fields all have one
    return field.column


@dataclass(frozen=True, slots=True)
class _Column:
    field: Field[Any, Any]
    kind: _Kind

    @property
    def name(self) -> str:
        return _column_name(self.field)

    def prepare(self, value: Any) -> Any:
        """The value to send, exactly as the ORM would send it (Postgres text holds no NUL)."""
        if value is None:
            return None
        if isinstance(value, str) and "\x00" in value:
            value = value.replace("\x00", "")
        if self.kind.plain(value):
            return value
        return self.from_orm(self.field.get_db_prep_save(value, connection))

    def from_orm(self, value: Any) -> Any:
        """A value prepared by Django, unwrapped from psycopg's Jsonb or Binary."""
        if isinstance(value, Jsonb | psycopg.Binary):
            return value.obj
        return value

    def for_copy(self, value: Any) -> Any:
        if value is not None and self.kind.copy_type == "jsonb":
            return Jsonb(value, dumps=json_dumps)
        return value


class _RunTable:
    """The run table's columns, with what the writer needs to send a run or an outcome."""

    def __init__(self) -> None:
        fields = Run._meta.concrete_fields
        self.name = connection.ops.quote_name(Run._meta.db_table)
        self.columns = [_Column(f, _field_kind(f)) for f in fields]
        self.column_list = ", ".join(connection.ops.quote_name(_column_name(f)) for f in fields)
        self.copy_types = [c.kind.copy_type for c in self.columns]
        self.plain_types = [c.kind.plain_type for c in self.columns]
        self.index = {f.attname: i for i, f in enumerate(fields)}
        # Defaults computed once are only right when no field computes its value per row.
        self.static_defaults = not any(_per_row(f) for f in fields)
        self.defaults = [c.prepare(c.field.get_default()) for c in self.columns]
        self.jsonb = [i for i, c in enumerate(self.columns) if c.kind.copy_type == "jsonb"]
        self.accepted_at = self.columns[self.index["accepted_at"]]

    def row(self, fields: RunFields) -> list[Any]:
        """A run's values for COPY, in column order."""
        if not self.static_defaults:
            return self.row_through_model(fields)
        row = self.defaults.copy()
        index, columns, plain_types = self.index, self.columns, self.plain_types
        for key, value in fields.items():
            i = index.get(key)
            if i is None:
                return self.row_through_model(fields)
            # Most values are already of their column's plain type: sent without a call (a call
            # per value was a third of the writer's CPU for a non-streaming run). Text with a
            # NUL, and every other value, are prepared.
            if type(value) is plain_types[i] and not (type(value) is str and "\x00" in value):
                row[i] = value
            else:
                row[i] = columns[i].prepare(value)
        for i in self.jsonb:
            row[i] = columns[i].for_copy(row[i])
        return row

    def row_through_model(self, fields: RunFields) -> list[Any]:
        """A run's values, through a model instance as the ORM's INSERT takes them."""
        # For what `row` cannot do: a foreign key given by its name, defaults made per row.
        run = Run(**{key: _without_nul(value) for key, value in fields.items()})
        values = [
            c.field.get_db_prep_save(c.field.pre_save(run, True), connection) for c in self.columns
        ]
        return [
            c.for_copy(c.from_orm(value)) for c, value in zip(self.columns, values, strict=True)
        ]

    def outcome_column(self, name: str) -> _Column:
        i = self.index.get(name)
        if i is None:  # a field's name rather than its attname: slow, but as the ORM does
            field = Run._meta.get_field(name)
            assert isinstance(field, Field)  # the run's own columns, never a relation's reverse
            return _Column(field, _field_kind(field))
        return self.columns[i]

    @functools.cache  # noqa: B019 (one table object for the process's life)
    def update_sql(self, names: tuple[str, ...]) -> str:
        """The UPDATE applying outcomes with these fields; the same text for any number of runs."""
        quote = connection.ops.quote_name
        definitions, assignments = [], []
        for name in names:
            outcome = self.outcome_column(name)
            column, db_type = quote(outcome.name), outcome.field.db_type(connection) or ""
            if db_type.startswith("varchar"):
                # Read as text, then cast: an explicit cast to varchar(n) truncates, as the
                # `%s::varchar(n)` of earlier writers did, where reading as varchar(n) fails.
                definitions.append(f"{column} text")
                assignments.append(f"{column} = v.{column}::{db_type}")
            else:
                definitions.append(f"{column} {db_type}")
                assignments.append(f"{column} = v.{column}")
        return (
            f"UPDATE {self.name} AS r SET {', '.join(assignments)}"
            " FROM jsonb_to_recordset(%s)"
            f" AS v(id text, accepted_at timestamptz, {', '.join(definitions)})"
            # The acceptance time too: the run's partition, the one Postgres reads.
            " WHERE r.id = v.id AND r.accepted_at = v.accepted_at"
        )


def _per_row(field: Field[Any, Any]) -> bool:
    """Whether the ORM computes this field's value per row (or leaves it to the database)."""
    return (
        (field.has_default() and callable(field.default))
        or field.db_default is not NOT_PROVIDED
        or getattr(field, "auto_now", False)
        or getattr(field, "auto_now_add", False)
    )


def _without_nul(value: Any) -> Any:
    return value.replace("\x00", "") if isinstance(value, str) else value


@functools.cache
def _run_table() -> _RunTable:
    return _RunTable()


def _copy_runs(cursor: psycopg.Cursor[Any], runs: Sequence[RunFields], *, replay: bool) -> None:
    table = _run_table()
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
    table = _run_table()
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
