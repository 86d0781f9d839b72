"""The typed run record (`telemetry.store.fields`) names real columns of the run table, with their
nullability, so what the request path notes is what the writer can store."""

from __future__ import annotations

import types
import typing

from telemetry.models import Run
from telemetry.store.fields import RunFields

COLUMNS = {field.attname: field for field in Run._meta.concrete_fields}


def allows_none(annotation: object) -> bool:
    return type(None) in typing.get_args(annotation) or annotation is types.NoneType


def test_every_run_field_is_a_column_of_the_run_table() -> None:
    assert set(RunFields.__annotations__) - set(COLUMNS) == set()


def test_every_column_of_the_run_table_can_be_recorded() -> None:
    assert set(COLUMNS) - set(RunFields.__annotations__) == set()


def test_a_run_field_is_optional_exactly_where_its_column_is_nullable() -> None:
    hints = typing.get_type_hints(RunFields)
    mismatched = {
        name: (hints[name], COLUMNS[name].null)
        for name in hints
        if allows_none(hints[name]) != COLUMNS[name].null
    }
    assert mismatched == {}
