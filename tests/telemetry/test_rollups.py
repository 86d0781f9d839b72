"""Hourly usage rollups: exact sums per hour and who/what, recomputed whole and idempotently."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import call_command

from accounts.models import ApiKey, Organization
from accounts.services import key_create
from telemetry.models import Run, UsageRollup, WorkerLease
from telemetry.services.interruptions import runs_interrupt_orphaned
from telemetry.services.rollups import (
    IN_PROCESS_KEY,
    WATERMARK_KEY,
    RollupCounts,
    usage_rollup_hour_recompute,
    usage_rollup_hours_touched,
    usage_rollups_catch_up,
    usage_rollups_keep_fresh,
    usage_rollups_refresh,
)

pytestmark = pytest.mark.django_db

# Far from the runs other tests store (at the real "now"), so every hour here holds only ours.
HOUR = datetime(2021, 3, 5, 10, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)


@pytest.fixture
def org() -> Organization:
    return Organization.objects.create(name=f"rollups-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def key(org: Organization) -> ApiKey:
    return key_create(organization=org, name="rollups").key


@pytest.fixture
def no_watermark() -> Iterator[None]:
    cache.delete(WATERMARK_KEY)
    yield
    cache.delete(WATERMARK_KEY)


def _run(
    org: Organization,
    *,
    at: datetime,
    key: ApiKey | None = None,
    status: str = Run.Status.COMPLETED,
    http_status: int | None = 200,
    ttft_ms: int | None = None,
    latency_ms: int | None = None,
    end_user: str = "alice",
    model: str = "m1",
    deployment: str = "d1",
    **fields: Any,
) -> Run:
    return Run.objects.create(
        id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
        organization=org,
        api_key=key,
        end_user=end_user,
        model=model,
        deployment=deployment,
        status=status,
        http_status=http_status,
        accepted_at=at,
        first_token_at=None if ttft_ms is None else at + ttft_ms * MS,
        finished_at=None if latency_ms is None else at + latency_ms * MS,
        **fields,
    )


def _rows(org: Organization, hour: datetime = HOUR) -> list[dict[str, Any]]:
    return list(
        UsageRollup.objects.filter(organization=org, hour=hour)
        .order_by("api_key_id", "end_user", "model", "deployment")
        .values(
            "api_key_id",
            "end_user",
            "model",
            "deployment",
            "requests",
            "errors",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "cost",
            "latency_ms_sum",
            "ttft_ms_sum",
            "ttft_count",
        )
    )


def _one_hour_of_runs(org: Organization, key: ApiKey) -> None:
    m = timedelta(minutes=1)
    tokens = {"prompt_tokens": 10, "completion_tokens": 20}
    _run(
        org,
        key=key,
        at=HOUR + 5 * m,
        ttft_ms=200,
        latency_ms=1500,
        **tokens,
        cached_tokens=4,
        cost=Decimal("0.000010"),
    )
    _run(
        org,
        key=key,
        at=HOUR + 10 * m,
        ttft_ms=300,
        latency_ms=2000,
        prompt_tokens=7,
        completion_tokens=3,
        cost=Decimal("0.000002"),
    )
    # Failed mid-stream, after its 200: an error.
    _run(
        org,
        key=key,
        at=HOUR + 20 * m,
        status="failed",
        ttft_ms=100,
        latency_ms=700,
        prompt_tokens=5,
    )
    # Refused before generation: an error, no usage at all.
    _run(org, key=key, at=HOUR + 30 * m, status="refused", http_status=400, latency_ms=2)
    # Deduplicated: a request, with the leader's usage, at no cost.
    _run(
        org,
        key=key,
        at=HOUR + 40 * m,
        ttft_ms=50,
        latency_ms=60,
        **tokens,
        cached_tokens=10,
        cost=Decimal(0),
        dedupe_role="shared",
    )
    # Still streaming: not counted until it finishes.
    _run(
        org,
        key=key,
        at=HOUR + 50 * m,
        status="in_progress",
        http_status=None,
        ttft_ms=100,
        prompt_tokens=99,
    )
    # Stopped and cancelled by the client: requests, not errors.
    _run(
        org,
        key=key,
        at=HOUR + 55 * m,
        status="stopped",
        ttft_ms=100,
        latency_ms=400,
        prompt_tokens=3,
        completion_tokens=1,
        cost=Decimal("0.000001"),
    )
    _run(org, key=key, at=HOUR + 60 * m - MS, status="cancelled", latency_ms=10, prompt_tokens=2)
    # Other groups: another deployment; no key, no end user and another model.
    _run(org, key=key, at=HOUR + 45 * m, deployment="d2", latency_ms=20, prompt_tokens=4)
    _run(
        org,
        at=HOUR + m,
        end_user="",
        model="m2",
        ttft_ms=500,
        latency_ms=1000,
        prompt_tokens=1,
        completion_tokens=1,
        cost=Decimal("0.5"),
    )
    _run(
        org,
        at=HOUR + 2 * m,
        end_user="",
        model="m2",
        status="failed",
        http_status=502,
        latency_ms=30_000,
    )
    _run(
        org,
        at=HOUR + 3 * m,
        end_user="",
        model="m2",
        status="refused",
        http_status=429,
        latency_ms=1,
    )
    # The hours either side.
    _run(org, key=key, at=HOUR - MS, latency_ms=5, prompt_tokens=1000)
    _run(org, key=key, at=HOUR + 60 * m, latency_ms=5, prompt_tokens=1000)


EXPECTED = [
    {
        "api_key_id": 0,
        "end_user": "",
        "model": "m2",
        "deployment": "d1",
        "requests": 3,
        "errors": 2,
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "cached_tokens": 0,
        "cost": Decimal("0.5"),
        "latency_ms_sum": 31_001,
        "ttft_ms_sum": 500,
        "ttft_count": 1,
    },
    {
        "api_key_id": None,  # the key's id, filled in by the tests
        "end_user": "alice",
        "model": "m1",
        "deployment": "d1",
        "requests": 7,
        "errors": 2,
        "prompt_tokens": 10 + 7 + 5 + 10 + 3 + 2,
        "completion_tokens": 20 + 3 + 20 + 1,
        "cached_tokens": 4 + 10,
        "cost": Decimal("0.000013"),
        "latency_ms_sum": 1500 + 2000 + 700 + 2 + 60 + 400 + 10,
        "ttft_ms_sum": 200 + 300 + 100 + 50 + 100,
        "ttft_count": 5,
    },
    {
        "api_key_id": None,
        "end_user": "alice",
        "model": "m1",
        "deployment": "d2",
        "requests": 1,
        "errors": 0,
        "prompt_tokens": 4,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "cost": Decimal(0),
        "latency_ms_sum": 20,
        "ttft_ms_sum": 0,
        "ttft_count": 0,
    },
]


def _expected(key: ApiKey) -> list[dict[str, Any]]:
    return [EXPECTED[0], *({**row, "api_key_id": key.pk} for row in EXPECTED[1:])]


def test_it_sums_an_hour_per_organization_key_end_user_model_and_deployment(
    org: Organization, key: ApiKey
) -> None:
    _one_hour_of_runs(org, key)
    other = Organization.objects.create(name=f"rollups-{uuid.uuid4().hex[:12]}")
    _run(other, at=HOUR + timedelta(minutes=7), latency_ms=250, prompt_tokens=6)

    assert usage_rollup_hour_recompute(hour=HOUR + timedelta(minutes=33)) == 4

    assert _rows(org) == _expected(key)
    assert [(r["requests"], r["prompt_tokens"], r["latency_ms_sum"]) for r in _rows(other)] == [
        (1, 6, 250)
    ]
    assert not UsageRollup.objects.filter(
        hour__in=[HOUR - timedelta(hours=1), HOUR + timedelta(hours=1)]
    ).exists()


def test_recomputing_an_hour_twice_gives_the_same_rows(org: Organization, key: ApiKey) -> None:
    _one_hour_of_runs(org, key)

    usage_rollup_hour_recompute(hour=HOUR)
    first = _rows(org)
    usage_rollup_hour_recompute(hour=HOUR)

    assert _rows(org) == first == _expected(key)
    assert UsageRollup.objects.filter(organization=org, hour=HOUR).count() == 3


def test_a_run_still_streaming_is_counted_when_its_hour_is_recomputed_after_it_finishes(
    org: Organization, key: ApiKey
) -> None:
    run = _run(org, key=key, at=HOUR + timedelta(minutes=58), status="in_progress", ttft_ms=40)
    assert usage_rollups_refresh(since=HOUR, until=HOUR + timedelta(hours=1)) == RollupCounts(
        hours=1, rows=0
    )
    assert _rows(org) == []

    # A long stream: it finishes two hours after it was accepted.
    Run.objects.filter(pk=run.pk).update(
        status="completed",
        finished_at=run.accepted_at + timedelta(hours=2),
        prompt_tokens=8,
        completion_tokens=4000,
    )
    counts = usage_rollups_refresh(since=HOUR + timedelta(hours=2), until=HOUR + timedelta(hours=3))

    assert counts == RollupCounts(hours=1, rows=1)
    [row] = _rows(org)
    assert (row["requests"], row["errors"], row["completion_tokens"]) == (1, 0, 4000)
    assert (row["latency_ms_sum"], row["ttft_ms_sum"], row["ttft_count"]) == (7_200_000, 40, 1)


def test_a_crashed_worker_s_run_is_counted_as_an_error_once_it_is_interrupted(
    org: Organization, key: ApiKey
) -> None:
    last_seen = HOUR + timedelta(minutes=30)
    WorkerLease.objects.create(
        id="rollups-dead-worker",
        started_at=HOUR,
        renewed_at=last_seen,
        expires_at=last_seen + timedelta(seconds=30),
    )
    _run(
        org,
        key=key,
        at=HOUR + timedelta(minutes=10),
        status="in_progress",
        http_status=None,
        ttft_ms=50,
        prompt_tokens=9,
        worker="rollups-dead-worker",
    )
    assert usage_rollup_hour_recompute(hour=HOUR) == 0  # in progress: not counted yet

    assert org.pk in {run.organization_id for run in runs_interrupt_orphaned()}
    assert usage_rollup_hour_recompute(hour=HOUR) == 1

    [row] = _rows(org)
    assert (row["requests"], row["errors"], row["prompt_tokens"]) == (1, 1, 9)
    # It ended when its worker was last seen, 20 minutes after it was accepted.
    assert (row["latency_ms_sum"], row["ttft_ms_sum"], row["ttft_count"]) == (1_200_000, 50, 1)


def test_a_late_run_in_an_old_hour_is_picked_up_when_that_hour_is_recomputed(
    org: Organization, key: ApiKey
) -> None:
    _one_hour_of_runs(org, key)
    usage_rollup_hour_recompute(hour=HOUR)
    # Stored hours later (the writer's spool drained after an outage), with its old times.
    _run(
        org,
        key=key,
        at=HOUR + timedelta(minutes=12),
        ttft_ms=10,
        latency_ms=90,
        prompt_tokens=100,
        completion_tokens=50,
        cost=Decimal("0.000100"),
    )
    assert _rows(org) == _expected(key)  # not yet

    counts = usage_rollups_refresh(since=HOUR, until=HOUR + timedelta(hours=1))

    # The hour before (one run at 09:59:59.999, finished in this window) is recomputed too.
    assert counts == RollupCounts(hours=2, rows=4)
    late = {**_expected(key)[1]}
    late.update(
        requests=8,
        prompt_tokens=late["prompt_tokens"] + 100,
        completion_tokens=late["completion_tokens"] + 50,
        cost=Decimal("0.000113"),
        latency_ms_sum=late["latency_ms_sum"] + 90,
        ttft_ms_sum=late["ttft_ms_sum"] + 10,
        ttft_count=6,
    )
    assert _rows(org) == [EXPECTED[0], late, _expected(key)[2]]


def test_the_hours_touched_are_those_with_runs_accepted_or_finished_in_the_window(
    org: Organization,
) -> None:
    h = timedelta(hours=1)
    _run(org, at=HOUR + 10 * MS, latency_ms=5)  # before the window
    _run(org, at=HOUR + 50 * 60_000 * MS, latency_ms=2 * 3_600_000)  # finished in the window
    _run(org, at=HOUR + h + 5 * MS, latency_ms=5)  # accepted in the window
    _run(org, at=HOUR + 2 * h + 5 * MS, status="in_progress")  # accepted in the window
    _run(org, at=HOUR + 3 * h, latency_ms=5)  # after the window

    hours = usage_rollup_hours_touched(since=HOUR + h, until=HOUR + 3 * h)

    assert hours == [HOUR, HOUR + h, HOUR + 2 * h]


def test_the_task_catches_up_from_its_watermark_and_moves_it(
    org: Organization, no_watermark: None
) -> None:
    h = timedelta(hours=1)
    now = HOUR + 5 * h + timedelta(minutes=30)
    for offset in range(6):
        _run(org, at=HOUR + offset * h + timedelta(minutes=1), latency_ms=5, prompt_tokens=offset)

    # No watermark: the last two hours (14:00 and 15:00).
    assert usage_rollups_catch_up(hours=2, now=now) == RollupCounts(hours=2, rows=2)
    assert cache.get(WATERMARK_KEY) == now

    # The last refresh was long ago: start there, not two hours back.
    cache.set(WATERMARK_KEY, HOUR, timeout=None)
    assert usage_rollups_catch_up(hours=2, now=now) == RollupCounts(hours=6, rows=6)
    assert sorted(
        UsageRollup.objects.filter(organization=org).values_list("prompt_tokens", flat=True)
    ) == [0, 1, 2, 3, 4, 5]

    # Never further back than a week, however old the watermark.
    UsageRollup.objects.filter(organization=org).delete()
    cache.set(WATERMARK_KEY, HOUR - timedelta(days=30), timeout=None)
    later = HOUR + timedelta(days=8, minutes=30)
    _run(org, at=later - timedelta(minutes=1), latency_ms=5, prompt_tokens=7)
    assert usage_rollups_catch_up(hours=2, now=later) == RollupCounts(hours=1, rows=1)
    assert list(
        UsageRollup.objects.filter(organization=org).values_list("prompt_tokens", flat=True)
    ) == [7]


def test_without_beat_a_first_in_process_refresh_looks_back_a_week_then_two_hours(
    org: Organization, no_watermark: None
) -> None:
    cache.delete(IN_PROCESS_KEY)
    h = timedelta(hours=1)
    now = HOUR + timedelta(days=6, minutes=30)
    _run(org, at=HOUR + timedelta(minutes=1), latency_ms=5)  # six days before `now`
    _run(org, at=now - timedelta(minutes=10), latency_ms=5)

    assert usage_rollups_keep_fresh(now=now) == RollupCounts(hours=2, rows=2)
    # Within IN_PROCESS_EVERY of the last one: nothing is recomputed.
    _run(org, at=now + timedelta(minutes=5), latency_ms=5)
    assert usage_rollups_keep_fresh(now=now + timedelta(minutes=6)) is None
    assert sum(UsageRollup.objects.filter(organization=org).values_list("requests", flat=True)) == 2

    # IN_PROCESS_EVERY has passed: from the watermark on (at least two hours back), not a week.
    cache.delete(IN_PROCESS_KEY)
    assert usage_rollups_keep_fresh(now=now + h) == RollupCounts(hours=1, rows=1)
    assert sorted(
        UsageRollup.objects.filter(organization=org).values_list("requests", flat=True)
    ) == [1, 2]
    cache.delete(IN_PROCESS_KEY)


def test_the_rollupusage_command_recomputes_a_range(org: Organization, key: ApiKey) -> None:
    _one_hour_of_runs(org, key)

    call_command("rollupusage", since="2021-03-05T10:00Z", until="2021-03-05T11:00Z")

    assert _rows(org) == _expected(key)
