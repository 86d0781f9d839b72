"""The dashboard's reads on Postgres: run filters, keyset pagination, sessions, the audit,
the overview's sums and percentiles, and replies put back together from chunks."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import orjson
import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Organization
from accounts.services import key_create
from dashboard.selectors.audit import (
    AUDIT_DIMENSIONS,
    AuditQuery,
    audit_csv_rows,
    audit_rows,
    audit_totals,
)
from dashboard.selectors.live import generations_in_flight
from dashboard.selectors.overview import OverviewFilters, overview, percentile_cont
from dashboard.selectors.replies import reply_of
from dashboard.selectors.runs import Cursor, RunFilters, runs_page
from dashboard.selectors.sessions import SessionQuery, session_summaries
from gateway.surfaces.chat.chunks import DONE, ChunkEncoder
from gateway.tokens import default_counter
from telemetry.models import Run, RunChunk, UsageRollup, WorkerLease
from telemetry.services.interruptions import runs_interrupt_orphaned
from telemetry.services.rollups import WATERMARK_KEY, usage_rollups_refresh
from tests.support.runs import finished_run

pytestmark = pytest.mark.django_db

T0 = datetime(2031, 3, 4, 10, 0, tzinfo=UTC)


def make_run(organization: Organization, **fields: object) -> Run:
    return finished_run(
        organization,
        fields.pop("accepted_at", T0),  # type: ignore[arg-type]
        ttft_ms=100,
        **{"model": "m-a", "deployment": "d-a", **fields},
    )


@pytest.fixture
def org() -> Organization:
    return Organization.objects.create(name="sel-org")


@pytest.fixture
def other_org() -> Organization:
    return Organization.objects.create(name="sel-other")


# -- runs list --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filter_name", "value", "field", "other"),
    [
        ("model", "m-b", "model", "m-a"),
        ("deployment", "d-b", "deployment", "d-a"),
        ("status", "failed", "status", "completed"),
        ("finish_reason", "length", "finish_reason", "stop"),
        ("session", "sess-9", "session", "sess-1"),
        ("end_user", "alice", "end_user", "bob"),
    ],
)
def test_each_filter_keeps_only_matching_runs(
    org: Organization, filter_name: str, value: str, field: str, other: str
) -> None:
    wanted = {
        make_run(org, accepted_at=T0 + timedelta(seconds=i), **{field: value}).pk for i in range(3)
    }
    for i in range(4):
        make_run(org, accepted_at=T0 + timedelta(seconds=10 + i), **{field: other})
    page = runs_page(RunFilters(organization_id=org.pk, **{filter_name: value}))
    assert {r["id"] for r in page.runs} == wanted


def test_organization_key_and_time_filters(org: Organization, other_org: Organization) -> None:
    key = key_create(organization=org, name="k").key
    with_key = make_run(org, api_key=key, accepted_at=T0 + timedelta(minutes=5))
    make_run(org, accepted_at=T0 + timedelta(minutes=6))
    make_run(other_org, accepted_at=T0 + timedelta(minutes=5))
    early = make_run(org, accepted_at=T0)

    assert [r["id"] for r in runs_page(RunFilters(api_key_id=key.pk)).runs] == [with_key.pk]
    assert len(runs_page(RunFilters(organization_id=org.pk)).runs) == 3
    in_window = runs_page(
        RunFilters(
            organization_id=org.pk,
            since=T0 + timedelta(minutes=1),
            until=T0 + timedelta(minutes=6),
        )
    )
    assert [r["id"] for r in in_window.runs] == [with_key.pk]
    until_first = runs_page(RunFilters(organization_id=org.pk, until=T0 + timedelta(seconds=1)))
    assert [r["id"] for r in until_first.runs] == [early.pk]


def test_keyset_pages_walk_every_run_once_newest_first_and_back(org: Organization) -> None:
    # Three runs share one acceptance time: the id breaks the tie.
    moments = [
        T0,
        T0 + timedelta(seconds=1),
        *[T0 + timedelta(seconds=2)] * 3,
        T0 + timedelta(seconds=3),
    ]
    runs = [make_run(org, accepted_at=moment) for moment in moments]
    expected = [r.pk for r in sorted(runs, key=lambda r: (r.accepted_at, r.pk), reverse=True)]

    mine = RunFilters(organization_id=org.pk)
    pages, page = [], runs_page(mine, size=2)
    assert page.newer is None
    while True:
        pages.append([r["id"] for r in page.runs])
        if page.older is None:
            break
        page = runs_page(mine, before=page.older, size=2)
    assert pages == [expected[0:2], expected[2:4], expected[4:6]]

    # And back: newer than the last page's first run gives the middle page, then the first.
    back = runs_page(mine, after=Cursor.parse(str(page.newer)), size=2)
    assert [r["id"] for r in back.runs] == expected[2:4]
    back = runs_page(mine, after=back.newer, size=2)
    assert [r["id"] for r in back.runs] == expected[0:2]
    assert back.newer is None


@pytest.mark.postgres  # the SQL asserted is Postgres's (its timestamp literals)
def test_the_list_query_uses_the_key_not_offset(org: Organization) -> None:
    make_run(org)
    with CaptureQueriesContext(connection) as queries:
        runs_page(RunFilters(organization_id=org.pk), before=Cursor(T0, "chatcmpl-z"))
    sql = queries.captured_queries[-1]["sql"]
    assert "OFFSET" not in sql.upper()
    assert sql.endswith("ORDER BY 12 DESC, 1 DESC LIMIT 51")  # accepted_at, id (the key)
    assert '"telemetry_run"."accepted_at" <= \'2031-03-04 10:00:00+00:00\'' in sql


def test_cursor_round_trips_and_refuses_garbage() -> None:
    cursor = Cursor(datetime(2031, 3, 4, 10, 0, 0, 123456, tzinfo=UTC), "chatcmpl-abc")
    assert Cursor.parse(str(cursor)) == cursor
    for garbage in ("", "abc", "12", ".chatcmpl-x", "99999999999999999999999.x"):
        assert Cursor.parse(garbage) is None


# -- sessions ---------------------------------------------------------------------------------


def test_sessions_report_stickiness_and_cache_hits(org: Organization) -> None:
    for kept, cached in ((True, 50), (True, 30), (False, 0), (None, 20)):
        make_run(org, session="conv-1", session_kept=kept, cached_tokens=cached, replica="r1")
    make_run(org, session="conv-2", accepted_at=T0 + timedelta(minutes=1))
    make_run(org, session="", accepted_at=T0 + timedelta(minutes=2))  # no session: not listed

    found = session_summaries(SessionQuery(since=T0 - timedelta(hours=1), organization_id=org.pk))
    assert [s["session"] for s in found] == ["conv-2", "conv-1"]
    conv1 = found[1]
    assert (conv1["runs"], conv1["routed"], conv1["kept"]) == (4, 3, 2)
    assert conv1["stickiness"] == pytest.approx(2 / 3)
    assert conv1["cache_hit_ratio"] == pytest.approx(100 / 400)
    assert found[0]["stickiness"] is None  # never routed to a replica
    by_runs = session_summaries(
        SessionQuery(since=T0 - timedelta(hours=1), organization_id=org.pk, sort="-runs")
    )
    assert by_runs[0]["session"] == "conv-1"


# -- audit and overview -----------------------------------------------------------------------


@pytest.fixture
def usage(org: Organization, other_org: Organization) -> dict[str, object]:
    key = key_create(organization=org, name="audit").key
    make_run(
        org, api_key=key, end_user="alice", prompt_tokens=100, cached_tokens=40, cost=Decimal("0.5")
    )
    make_run(
        org, api_key=key, end_user="alice", prompt_tokens=300, cached_tokens=0, cost=Decimal("1.5")
    )
    make_run(
        org,
        api_key=key,
        end_user="bob",
        model="m-b",
        prompt_tokens=50,
        cached_tokens=50,
        cost=Decimal("0.25"),
        accepted_at=T0 + timedelta(days=1),
    )
    make_run(
        org,
        status=Run.Status.FAILED,
        http_status=502,
        end_user="bob",
        prompt_tokens=None,
        completion_tokens=None,
        cost=None,
        first_token_at=None,
        accepted_at=T0 + timedelta(hours=1),
    )
    make_run(other_org, end_user="carol", cost=Decimal("9"))
    usage_rollups_refresh(since=T0 - timedelta(hours=1), until=T0 + timedelta(days=2))
    return {"key": key}


def test_audit_groups_and_sorts_the_rollups(org: Organization, usage: dict) -> None:
    query = AuditQuery(
        since=date(2031, 3, 4),
        until=date(2031, 3, 5),
        organization_id=org.pk,
        group=AUDIT_DIMENSIONS,
    )
    rows = audit_rows(query)
    assert [(r["end_user"], r["model"], r["day"], r["requests"]) for r in rows] == [
        ("alice", "m-a", date(2031, 3, 4), 2),
        ("bob", "m-b", date(2031, 3, 5), 1),
        ("bob", "m-a", date(2031, 3, 4), 1),
    ]
    alice = rows[0]
    assert (alice["prompt_tokens"], alice["cached_tokens"], alice["cost"]) == (
        400,
        40,
        Decimal("2"),
    )
    assert alice["cache_hit_ratio"] == pytest.approx(0.1)
    assert alice["key_label"].endswith("audit")
    assert rows[2]["cache_hit_ratio"] is None  # no prompt tokens at all

    by_user = audit_rows(
        AuditQuery(**{**query.__dict__, "group": ("end_user",), "sort": "end_user"})
    )
    assert [(r["end_user"], r["requests"]) for r in by_user] == [("alice", 2), ("bob", 2)]
    by_ratio = audit_rows(
        AuditQuery(**{**query.__dict__, "group": ("end_user",), "sort": "-cache_hit_ratio"})
    )
    assert [r["end_user"] for r in by_ratio] == ["bob", "alice"]  # 50/50 before 40/400

    totals = audit_totals(query)
    assert (totals["requests"], totals["cost"], totals["prompt_tokens"]) == (
        4,
        Decimal("2.25"),
        450,
    )
    csv_rows = list(audit_csv_rows(query))
    assert csv_rows[0][:5] == ["organization", "key", "end_user", "model", "day"]
    assert csv_rows[1][0] == "sel-org" and csv_rows[1][2:6] == ["alice", "m-a", "2031-03-04", 2]
    assert csv_rows[1][9:] == ["0.1000", Decimal("2.000000000")]


def test_overview_sums_rollups_and_takes_percentiles_of_runs(
    org: Organization, usage: dict
) -> None:
    latencies = [200, 400, 600, 800, 1000]
    for i, ms in enumerate(latencies):
        make_run(
            org,
            model="m-p",
            accepted_at=T0 + timedelta(minutes=10 + i),
            finished_at=T0 + timedelta(minutes=10 + i, milliseconds=ms),
            first_token_at=T0 + timedelta(minutes=10 + i, milliseconds=ms // 10),
        )
    usage_rollups_refresh(since=T0, until=T0 + timedelta(hours=1))
    figures = overview(
        OverviewFilters(
            since=T0, until=T0 + timedelta(hours=3), organization_id=org.pk, model="m-p"
        )
    )
    assert figures.totals["requests"] == 5
    assert figures.sampled_runs == 5
    assert figures.percentiles.latency_p50 == 600.0
    assert figures.percentiles.latency_p95 == pytest.approx(960.0)
    assert figures.percentiles.ttft_p50 == 60.0
    assert len(figures.hours) == 3
    assert figures.series["requests"] == [5, 0, 0]
    assert figures.series["latency_p50"] == [600.0, None, None]

    everything = overview(
        OverviewFilters(since=T0, until=T0 + timedelta(days=2), organization_id=org.pk)
    )
    assert everything.totals["requests"] == 9
    assert everything.totals["errors"] == 1
    assert everything.totals["cost"] == Decimal("2.25") + Decimal("0.005")
    assert everything.totals["cache_hit_ratio"] == pytest.approx(90 / (450 + 500))


def test_overview_reads_recent_hours_from_runs_and_older_ones_from_rollups(
    org: Organization,
) -> None:
    """Beat has not run (no rollups for the last two hours), and a rollup row of an older
    hour stands for runs retention has since purged: both are counted, neither twice."""
    cache.delete(WATERMARK_KEY)
    now = T0 + timedelta(hours=5, minutes=30)  # fresh hours: 14:00 and 15:00
    UsageRollup.objects.create(
        hour=T0 + timedelta(hours=1), organization=org, requests=7, errors=2, cost=Decimal("3")
    )
    make_run(org, accepted_at=T0 + timedelta(hours=1, minutes=5))  # in that rollup's hour
    make_run(org, accepted_at=T0 + timedelta(hours=4, minutes=1))
    make_run(org, accepted_at=T0 + timedelta(hours=5, minutes=1), status=Run.Status.FAILED)
    make_run(org, accepted_at=T0 + timedelta(hours=5, minutes=2), status=Run.Status.IN_PROGRESS)

    figures = overview(OverviewFilters(since=T0, until=now, organization_id=org.pk), now=now)

    assert figures.series["requests"] == [0, 7, 0, 0, 1, 1]
    assert figures.series["errors"] == [0, 2, 0, 0, 0, 1]
    assert (figures.totals["requests"], figures.totals["errors"]) == (9, 3)
    assert figures.totals["cost"] == Decimal("3.002")
    assert figures.totals["prompt_tokens"] == 200


def test_overview_reads_rollups_before_the_watermark_s_hour_and_runs_from_it(
    org: Organization,
) -> None:
    """Beat refreshed at 15:10: hours before 15:00 come from the rollups, 15:00 on from the
    runs table, so the runs after the refresh count, and each run counts once."""
    watermark = T0 + timedelta(hours=5, minutes=10)
    for minutes in (65, 5 * 60 + 5):  # 11:05 and 15:05, before the refresh
        make_run(org, accepted_at=T0 + timedelta(minutes=minutes))
    usage_rollups_refresh(since=T0, until=watermark)
    cache.set(WATERMARK_KEY, watermark, timeout=None)
    UsageRollup.objects.filter(organization=org, hour=T0 + timedelta(hours=1)).update(requests=7)
    make_run(org, accepted_at=T0 + timedelta(hours=5, minutes=20))  # after the refresh
    make_run(org, accepted_at=T0 + timedelta(hours=5, minutes=25), status=Run.Status.FAILED)
    now = T0 + timedelta(hours=5, minutes=30)
    try:
        figures = overview(OverviewFilters(since=T0, until=now, organization_id=org.pk), now=now)
    finally:
        cache.delete(WATERMARK_KEY)

    # 11:00 from its (edited) rollup row, not from the runs table; 15:00 from the runs only.
    assert figures.series["requests"] == [0, 7, 0, 0, 0, 3]
    assert figures.series["errors"] == [0, 0, 0, 0, 0, 1]
    assert figures.totals["requests"] == 10


def test_percentile_cont_interpolates_like_postgres() -> None:
    assert percentile_cont([], 0.5) is None
    assert percentile_cont([1.0], 0.95) == 1.0
    assert percentile_cont([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile_cont([0.0, 10.0], 0.95) == pytest.approx(9.5)


# -- replies and generations in flight --------------------------------------------------------


def test_reply_is_put_back_together_from_a_stream() -> None:
    encoder = ChunkEncoder(completion_id="chatcmpl-x", created=1, model="m")
    chunks = [
        encoder.delta({"role": "assistant", "content": ""}),
        encoder.delta({"content": "It caps "}),
        encoder.delta({"reasoning_content": "thinking"}),
        encoder.delta(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_1", "function": {"name": "get", "arguments": '{"a"'}}
                ]
            }
        ),
        encoder.delta({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        encoder.delta({"content": "tokens."}),
        b": ping\n\n",
        encoder.finish("stop"),
        encoder.usage({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}),
        DONE,
    ]
    reply = reply_of(chunks)
    assert reply.content == "It caps tokens."
    assert reply.reasoning == "thinking"
    assert reply.tool_calls == [{"id": "call_1", "name": "get", "arguments": '{"a": 1}'}]
    assert reply.finish_reason == "stop"

    body = orjson.dumps(
        {"choices": [{"message": {"content": "Whole."}, "finish_reason": "length"}]}
    )
    assert (reply_of([body]).content, reply_of([body]).finish_reason) == ("Whole.", "length")
    error = reply_of([b'data: {"error": {"message": "boom", "code": "upstream_error"}}\n\n'])
    assert error.error == {"message": "boom", "code": "upstream_error"}


def test_a_crashed_worker_s_run_leaves_the_generations_in_flight_once_interrupted(
    org: Organization,
) -> None:
    now = datetime.now(UTC)
    WorkerLease.objects.create(
        id="live-dead-worker",
        started_at=now - timedelta(minutes=5),
        renewed_at=now - timedelta(seconds=40),
        expires_at=now - timedelta(seconds=10),
    )
    crashed = make_run(
        org,
        status=Run.Status.IN_PROGRESS,
        accepted_at=now - timedelta(minutes=1),
        finished_at=None,
        worker="live-dead-worker",
    )
    in_flight = [g.id for g in generations_in_flight(now=now) if g.organization_id == org.pk]
    assert in_flight == [crashed.pk]

    assert org.pk in {run.organization_id for run in runs_interrupt_orphaned()}

    assert [g for g in generations_in_flight(now=now) if g.organization_id == org.pk] == []


def test_generations_in_flight_count_the_tokens_stored_so_far(org: Organization) -> None:
    now = datetime.now(UTC)
    running = make_run(
        org,
        status=Run.Status.IN_PROGRESS,
        accepted_at=now - timedelta(seconds=2),
        finished_at=None,
        session="s-1",
    )
    make_run(org, status=Run.Status.IN_PROGRESS, accepted_at=now - timedelta(days=1))  # abandoned
    make_run(org, accepted_at=now)  # finished
    encoder = ChunkEncoder(completion_id=running.pk, created=1, model="m")
    pieces = [
        encoder.delta({"role": "assistant", "content": ""}),
        encoder.delta({"content": "You said: hello"}),
        encoder.delta({"content": " there"}),
    ]
    RunChunk.objects.bulk_create(
        RunChunk(run=running, seq=i, offset_us=i * 1000, data=data) for i, data in enumerate(pieces)
    )
    found = generations_in_flight(now=now)
    found = [g for g in found if g.organization_id == org.pk]
    assert [g.id for g in found] == [running.pk]
    assert found[0].chunks == 3
    assert found[0].tokens_so_far == default_counter().count("You said: hello there")
    assert found[0].as_json(now=now)["session"] == "s-1"
