"""The run writer stores every value exactly as the ORM would, whichever way a run reaches it:
COPYed whole, COPYed then updated with its outcome, or replayed from the spool."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from telemetry.models import Run
from telemetry.store.batches import write_batch
from telemetry.store.items import ChunkSent, RunClosed, RunOpened, WriterItem
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db

ACCEPTED = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def opened_fields(tenant: Tenant, run_id: str) -> dict[str, Any]:
    """What the gateway records when a run opens, with awkward values where they can occur."""
    return {
        "id": run_id,
        "accepted_at": ACCEPTED,
        "organization_id": tenant.organization.id,
        "api_key_id": tenant.key.id,
        "request_body": b'{"messages": [{"content": "\\u00e9\\u0000"}]}\x00\xff',
        "request_bytes": 48,
        "request_id": "req-1",
        "model": "scripted-small",
        "deployment": "scripted",
        "session": "sess-é🦩",
        "end_user": "user 'quoted' \"twice\" \\ back",
        "optimizer_report": {"mode": "shadow", "saved": 4, "ratio": 0.1, "rules": ["a", "é"]},
        "tool_selector_report": "a JSON string, not an object",
        "prompt_tokens": 52,
        "stream": True,
        "max_tokens": 256,
        "upstream_request": memoryview(b"\x00upstream\xff"),
        "status": Run.Status.IN_PROGRESS,
    }


def closed_fields() -> dict[str, Any]:
    """A run's outcome: a datetime in another zone, a Decimal, a float cost, nested usage."""
    return {
        "replica": "http://10.0.0.7:8000",
        "session_kept": False,
        "status": Run.Status.COMPLETED,
        "http_status": 200,
        "finished_at": datetime(2025, 3, 4, 7, 6, 8, 5, tzinfo=timezone(timedelta(hours=2))),
        "first_token_at": ACCEPTED + timedelta(microseconds=1),
        "chunk_count": 2,
        "finish_reason": "stop",
        "completion_tokens": 20,
        "total_tokens": 72,
        "cached_tokens": None,
        "cost": Decimal("0.000123400"),
        "usage": {
            "prompt_tokens": 52,
            "completion_tokens": 20,
            # orjson refuses the big int and the int key; json.dumps takes them, as for the ORM.
            "details": {"cached": None, "big": 2**70, "f": 1e-7, "keys": {2: "an int key"}},
        },
        "usage_source": Run.UsageSource.UPSTREAM,
        "error_message": "line\nbreak\ttab",
    }


def stored(run_id: str) -> dict[str, Any]:
    values = Run.objects.filter(pk=run_id).values().get()
    values.pop("id")
    for name in ("request_body", "upstream_request"):
        if values[name] is not None:
            values[name] = bytes(values[name])
    return values


def the_orm_way(tenant: Tenant) -> dict[str, Any]:
    run_id = f"chatcmpl-{secrets.token_hex(12)}"
    Run.objects.create(**opened_fields(tenant, run_id))
    Run.objects.filter(pk=run_id).update(**closed_fields())
    return stored(run_id)


def items(tenant: Tenant) -> tuple[str, list[WriterItem]]:
    run_id = f"chatcmpl-{secrets.token_hex(12)}"
    return run_id, [
        RunOpened(opened_fields(tenant, run_id)),
        ChunkSent(run_id, 0, 10, b"data: 1\n\n"),
        ChunkSent(run_id, 1, 20, b"data: 2\n\n"),
        RunClosed(run_id, closed_fields()),
    ]


def test_a_run_opened_and_closed_in_one_batch_is_stored_as_the_orm_stores_it(
    tenant: Tenant,
) -> None:
    run_id, rows = items(tenant)
    write_batch(rows)
    assert stored(run_id) == the_orm_way(tenant)


def test_an_outcome_written_in_a_later_batch_is_stored_as_the_orm_stores_it(
    tenant: Tenant,
) -> None:
    run_id, rows = items(tenant)
    write_batch(rows[:3])
    write_batch(rows[3:])
    assert stored(run_id) == the_orm_way(tenant)


def test_a_replayed_run_is_stored_as_the_orm_stores_it(tenant: Tenant) -> None:
    run_id, rows = items(tenant)
    write_batch(rows[:2])
    write_batch(rows, replay=True)
    assert stored(run_id) == the_orm_way(tenant)


def test_values_of_other_types_are_converted_as_the_orm_converts_them(tenant: Tenant) -> None:
    # A naive datetime (taken as UTC), ints for a Decimal and a bool, a float cost, a text
    # field given a number: the ORM's own field preparation handles each.
    run_id, rows = items(tenant)
    closed = {
        "finished_at": datetime(2025, 3, 4, 7, 6, 8),
        "cost": 0.25,
        "session_kept": 1,
        "request_id": 12345,
        "prompt_tokens": True,
    }
    other_id, other_rows = items(tenant)
    with pytest.warns(RuntimeWarning):  # the writer prepares fields as the ORM does: it warns
        write_batch([*rows[:3], RunClosed(run_id, closed)])
        write_batch(other_rows[:3])
        write_batch([RunClosed(other_id, closed)])
    reference_id = f"chatcmpl-{secrets.token_hex(12)}"
    with pytest.warns(RuntimeWarning):  # the ORM warns about the naive datetime
        Run.objects.create(**{**opened_fields(tenant, reference_id), **closed})
    assert stored(run_id) == stored(other_id) == stored(reference_id)


def test_a_run_given_its_foreign_keys_by_name_is_stored(tenant: Tenant) -> None:
    run_id = f"chatcmpl-{secrets.token_hex(12)}"
    fields = opened_fields(tenant, run_id)
    del fields["organization_id"], fields["api_key_id"]
    write_batch([RunOpened({**fields, "organization": tenant.organization, "api_key": None})])
    run = Run.objects.get(pk=run_id)
    assert (run.organization_id, run.api_key_id) == (tenant.organization.id, None)


def test_nul_is_dropped_from_text_but_kept_in_bytes(tenant: Tenant) -> None:
    run_id = f"chatcmpl-{secrets.token_hex(12)}"
    opened = RunOpened({**opened_fields(tenant, run_id), "end_user": "a\x00b"})
    write_batch([opened])
    write_batch([RunClosed(run_id, {"error_message": "\x00c\x00", "finish_reason": "s\x00"})])
    run = Run.objects.get(pk=run_id)
    assert (run.end_user, run.error_message, run.finish_reason) == ("ab", "c", "s")
    assert bytes(run.request_body).endswith(b"\x00\xff")


def test_an_outcome_text_longer_than_its_column_is_cut_to_fit(tenant: Tenant) -> None:
    # As the outcome UPDATE has always done (an explicit cast to varchar(n) truncates).
    run_id, rows = items(tenant)
    write_batch(rows[:3])
    write_batch([RunClosed(run_id, {"finish_reason": "x" * 40})])
    assert Run.objects.get(pk=run_id).finish_reason == "x" * 32


def test_the_items_given_are_left_as_they_were(tenant: Tenant) -> None:
    # A batch that fails is tried again, or spooled, from the same items.
    run_id, rows = items(tenant)
    before = [dict(item.fields) for item in rows if not isinstance(item, ChunkSent)]
    write_batch([*rows, RunClosed(run_id, {"error_code": "late"})])
    write_batch([RunClosed(run_id, {"status": "failed"}), RunClosed(run_id, {"http_status": 500})])
    after = [dict(item.fields) for item in rows if not isinstance(item, ChunkSent)]
    assert after == before
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.http_status, run.error_code) == ("failed", 500, "late")
