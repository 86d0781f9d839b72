"""The run table's columns as the Postgres writer sends them: each column's type for binary COPY,
and a run's values exactly as the ORM would store them.

The writer's thread shares one CPU with the gateway's event loop, so the cost per value is kept
low without changing what is stored:

- Every column's type is fixed up front, so psycopg dumps whole rows in C. A run's row starts
  from the model's defaults; a value goes through Django's field preparation only when it is
  not already of the column's plain Python type.
- JSON is encoded with orjson, or by ``json.dumps`` (as the ORM does) when orjson refuses a
  value (keys that are not strings, integers beyond 64 bits).
- An outcome's UPDATE has one text per set of field names, whatever the number of runs: its rows
  travel as one jsonb parameter, spread into typed columns by ``jsonb_to_recordset``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson
import psycopg
from django.db import connection
from django.db.models import NOT_PROVIDED, Field, ForeignKey
from psycopg.types.json import Jsonb

from telemetry.models import Run
from telemetry.store.fields import RunFields


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
    # `RunTable.row` sends those as they are without a call per value.
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
class Column:
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


class RunTable:
    """The run table's columns, with what the writer needs to send a run or an outcome."""

    def __init__(self) -> None:
        fields = Run._meta.concrete_fields
        self.name = connection.ops.quote_name(Run._meta.db_table)
        self.columns = [Column(f, _field_kind(f)) for f in fields]
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

    def outcome_column(self, name: str) -> Column:
        i = self.index.get(name)
        if i is None:  # a field's name rather than its attname: slow, but as the ORM does
            field = Run._meta.get_field(name)
            assert isinstance(field, Field)  # the run's own columns, never a relation's reverse
            return Column(field, _field_kind(field))
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
def run_table() -> RunTable:
    """The run table, read from the model once a process."""
    return RunTable()
