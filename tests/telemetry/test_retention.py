"""The retention purge: expired runs go, `metadata` organizations keep no prompt or reply text."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Organization
from telemetry.models import Run, RunChunk
from telemetry.services.retention import (
    PurgeCounts,
    organization_runs_purge,
    runs_purge_expired,
)

pytestmark = pytest.mark.django_db

NOW = datetime(2024, 6, 15, 12, 0, tzinfo=UTC)
BODY = b'{"messages":[{"role":"user","content":"my secret prompt"}]}'
FORWARDED = b'{"model":"m","messages":[{"role":"user","content":"my secret prompt"}]}'


def _org(retention: str = "full", days: int = 30) -> Organization:
    return Organization.objects.create(
        name=f"retention-{uuid.uuid4().hex[:12]}", retention=retention, retention_days=days
    )


def _run(
    org: Organization,
    *,
    age: timedelta,
    chunks: int = 0,
    status: str = Run.Status.COMPLETED,
    http_status: int | None = 200,
    body: bytes | None = BODY,
    forwarded: bytes | None = None,
) -> Run:
    run = Run.objects.create(
        id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
        organization=org,
        status=status,
        http_status=http_status,
        request_body=body,
        request_bytes=len(body or b""),
        upstream_request=forwarded,
        accepted_at=NOW - age,
        finished_at=NOW - age + timedelta(seconds=1),
        # What the dashboard's search reads, as the run writer and the relay store it.
        prompt_text="hello" if body else "",
        reply_text="reply text" if chunks else "",
        prompt_tokens=12,
        completion_tokens=30,
        chunk_count=chunks,
    )
    RunChunk.objects.bulk_create(
        RunChunk(run=run, seq=seq, offset_us=seq * 1000, data=b"data: reply text\n\n")
        for seq in range(chunks)
    )
    return run


def _chunks(run: Run) -> int:
    return RunChunk.objects.filter(run=run).count()


def test_it_deletes_runs_and_their_chunks_older_than_the_retention_days() -> None:
    org = _org(days=30)
    old = _run(org, age=timedelta(days=31), chunks=3)
    just_expired = _run(org, age=timedelta(days=30, seconds=1), chunks=2)
    exactly_30_days = _run(org, age=timedelta(days=30), chunks=1)
    recent = _run(org, age=timedelta(days=29), chunks=4)

    counts = organization_runs_purge(organization=org, now=NOW)

    assert counts == PurgeCounts(runs_deleted=2, chunks_deleted=5, runs_stripped=0)
    assert set(Run.objects.filter(organization=org).values_list("id", flat=True)) == {
        exactly_30_days.id,
        recent.id,
    }
    assert not RunChunk.objects.filter(run_id__in=[old.id, just_expired.id]).exists()
    assert _chunks(recent) == 4
    recent.refresh_from_db()
    assert bytes(recent.request_body) == BODY  # a `full` organization keeps content


def test_each_organization_keeps_its_own_number_of_days() -> None:
    week = _org(days=7)
    quarter = _org(days=90)
    week_old = _run(week, age=timedelta(days=10), chunks=2)
    week_recent = _run(week, age=timedelta(days=6), chunks=2)
    quarter_old = _run(quarter, age=timedelta(days=10), chunks=2)

    counts = runs_purge_expired(now=NOW, organization_ids=[week.pk, quarter.pk])

    assert counts == PurgeCounts(runs_deleted=1, chunks_deleted=2, runs_stripped=0)
    assert not Run.objects.filter(pk=week_old.pk).exists()
    assert Run.objects.filter(pk__in=[week_recent.pk, quarter_old.pk]).count() == 2


def test_zero_retention_days_never_deletes_a_run_that_may_still_be_streaming() -> None:
    org = _org(days=0)
    streaming = _run(org, age=timedelta(minutes=5), status=Run.Status.IN_PROGRESS)
    yesterday = _run(org, age=timedelta(days=1, seconds=1))

    counts = organization_runs_purge(organization=org, now=NOW)

    assert counts.runs_deleted == 1
    assert list(Run.objects.filter(organization=org).values_list("id", flat=True)) == [streaming.id]
    assert not Run.objects.filter(pk=yesterday.pk).exists()


def test_big_purges_delete_chunks_and_runs_in_bounded_batches() -> None:
    org = _org(days=1)
    long_run = _run(org, age=timedelta(days=3), chunks=10)
    for _ in range(4):
        _run(org, age=timedelta(days=2), chunks=1)
    kept = _run(org, age=timedelta(hours=1), chunks=2)

    with CaptureQueriesContext(connection) as queries:
        counts = organization_runs_purge(organization=org, now=NOW, batch_size=3)

    assert counts == PurgeCounts(runs_deleted=5, chunks_deleted=14, runs_stripped=0)
    assert list(Run.objects.filter(organization=org).values_list("id", flat=True)) == [kept.id]
    assert not RunChunk.objects.filter(run_id=long_run.id).exists()
    assert _chunks(kept) == 2
    sql = [query["sql"] for query in queries.captured_queries]
    batched_chunk_deletes = [
        q for q in sql if q.startswith('DELETE FROM "telemetry_runchunk"') and "IN (SELECT" in q
    ]
    # 14 chunks, at most 3 per statement: at least 5 statements, none without its LIMIT.
    assert len(batched_chunk_deletes) >= 5
    assert all(q.endswith("LIMIT 3)") for q in batched_chunk_deletes)
    # 5 runs, at most 3 per statement.
    run_deletes = [q for q in sql if q.startswith('DELETE FROM "telemetry_run" ')]
    assert len(run_deletes) == 2


def test_a_metadata_organization_keeps_no_prompt_or_reply_text() -> None:
    org = _org(retention="metadata", days=30)
    completed = _run(org, age=timedelta(days=2), chunks=5, forwarded=FORWARDED)
    failed = _run(org, age=timedelta(hours=3), chunks=2, status=Run.Status.FAILED, http_status=502)
    too_large = _run(
        org, age=timedelta(days=1), chunks=1, status=Run.Status.REFUSED, http_status=413
    )
    no_content = _run(org, age=timedelta(days=1), body=None)

    counts = organization_runs_purge(organization=org, now=NOW)

    assert counts == PurgeCounts(runs_deleted=0, chunks_deleted=8, runs_stripped=3)
    for run in (completed, failed, too_large, no_content):
        run.refresh_from_db()
        assert run.request_body is None
        assert run.upstream_request is None
        assert (run.prompt_text, run.reply_text) == ("", "")  # nothing left to search
        assert _chunks(run) == 0
    # The metadata stays: who, when, outcome and usage.
    assert completed.status == Run.Status.COMPLETED
    assert (completed.prompt_tokens, completed.completion_tokens) == (12, 30)
    assert completed.request_bytes == len(BODY)
    assert completed.chunk_count == 5
    assert Run.objects.filter(organization=org).count() == 4


def test_a_metadata_organization_keeps_400_refused_bodies_for_seven_days() -> None:
    org = _org(retention="metadata", days=30)
    fresh = _run(org, age=timedelta(days=6, hours=23), chunks=1, status="refused", http_status=400)
    week_old = _run(
        org, age=timedelta(days=7, seconds=1), chunks=1, status="refused", http_status=400
    )
    odd = _run(
        org, age=timedelta(days=1), chunks=1, status="refused", http_status=400, forwarded=FORWARDED
    )

    counts = organization_runs_purge(organization=org, now=NOW)

    assert counts == PurgeCounts(runs_deleted=0, chunks_deleted=1, runs_stripped=2)
    fresh.refresh_from_db()
    assert bytes(fresh.request_body) == BODY
    assert _chunks(fresh) == 1
    week_old.refresh_from_db()
    assert week_old.request_body is None
    assert (week_old.prompt_text, week_old.reply_text) == ("", "")
    assert _chunks(week_old) == 0
    # Only the body as received is kept for debugging, never one forwarded to a model.
    odd.refresh_from_db()
    assert bytes(odd.request_body) == BODY
    assert odd.upstream_request is None
    assert _chunks(odd) == 1


def test_retention_days_win_over_the_seven_days_of_a_refused_body() -> None:
    org = _org(retention="metadata", days=3)
    refused = _run(org, age=timedelta(days=4), chunks=1, status="refused", http_status=400)

    counts = organization_runs_purge(organization=org, now=NOW)

    assert counts == PurgeCounts(runs_deleted=1, chunks_deleted=1, runs_stripped=0)
    assert not Run.objects.filter(pk=refused.pk).exists()


def test_a_second_purge_finds_nothing_left_to_do() -> None:
    org = _org(retention="metadata", days=10)
    _run(org, age=timedelta(days=11), chunks=3)
    stripped = _run(org, age=timedelta(days=1), chunks=2, forwarded=FORWARDED)
    refused = _run(org, age=timedelta(days=1), chunks=1, status="refused", http_status=400)

    first = organization_runs_purge(organization=org, now=NOW)
    second = organization_runs_purge(organization=org, now=NOW)

    assert first == PurgeCounts(runs_deleted=1, chunks_deleted=5, runs_stripped=1)
    assert second == PurgeCounts()
    assert Run.objects.filter(organization=org).count() == 2
    assert _chunks(stripped) == 0
    assert _chunks(refused) == 1


def test_content_written_after_a_purge_goes_with_the_next_one() -> None:
    org = _org(retention="metadata", days=10)
    run = _run(org, age=timedelta(minutes=1), chunks=1, status=Run.Status.IN_PROGRESS)
    assert organization_runs_purge(organization=org, now=NOW).runs_stripped == 1

    # The stream goes on: the writer stores more chunks after the purge.
    RunChunk.objects.create(run=run, seq=1, offset_us=5000, data=b"data: more\n\n")

    assert organization_runs_purge(organization=org, now=NOW) == PurgeCounts(
        chunks_deleted=1, runs_stripped=1
    )
    assert _chunks(run) == 0


def test_the_purgeruns_command_purges_one_organization() -> None:
    org = _org(days=1)
    other = _org(days=1)
    _run(org, age=timedelta(days=400), chunks=2)
    spared = _run(other, age=timedelta(days=400), chunks=2)

    call_command("purgeruns", organization=org.name)

    assert not Run.objects.filter(organization=org).exists()
    assert Run.objects.filter(pk=spared.pk).exists()
