"""The dashboard's pages as a staff user gets them, timed on the filled store: the runs list
(first and deep pages, free-text search, each filter), a run's page, and Spend over 30 days.

Each case is timed `samples` times through Django's test client (the views, their forms,
selectors, queries and templates: everything but the socket), each time with another value
(another organization, end user, session, word, day…), so the p95 is not one cached answer
served again. The database's share is summed from the queries Django ran for the page.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from bench.harness.stats import percentile

from .fill import END_USERS, INTERLEAVED, MODELS, SESSION_RUNS, Plan
from .vocabulary import word_of_rank

if TYPE_CHECKING:
    from django.test import Client

# How the end-user choices' query (dashboard.selectors.catalog.end_user_names) starts.
CHOICES_SQL = "WITH RECURSIVE rolled_up(end_user, n)"
RUNS_LIST_TARGET_MS = 200.0
RUN_PAGE_TARGET_MS = 100.0
SPEND_TARGET_MS = 1000.0


@dataclass
class Timed:
    """One case's timings: the whole page's, and its queries' share."""

    label: str
    target_ms: float
    page_ms: list[float] = field(default_factory=list)
    sql_ms: list[float] = field(default_factory=list)
    # The runs list's two big queries apart: the filters' end-user choices, and the rest.
    choices_ms: list[float] = field(default_factory=list)
    rest_sql_ms: list[float] = field(default_factory=list)
    slowest_query: tuple[float, str] = (0.0, "")

    @property
    def p95(self) -> float:
        return percentile(self.page_ms, 95) or 0.0

    @property
    def p50(self) -> float:
        return statistics.median(self.page_ms) if self.page_ms else 0.0

    @property
    def sql_p95(self) -> float:
        return percentile(self.sql_ms, 95) or 0.0

    @property
    def choices_p95(self) -> float:
        return percentile(self.choices_ms, 95) or 0.0

    @property
    def rest_sql_p95(self) -> float:
        return percentile(self.rest_sql_ms, 95) or 0.0

    @property
    def met(self) -> bool:
        return self.p95 <= self.target_ms


def _time_page(client: Client, path: str, timed: Timed) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        began = time.perf_counter()
        response = client.get(path)
        ms = (time.perf_counter() - began) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{path}: HTTP {response.status_code}")
    timed.page_ms.append(ms)
    times = [(float(q["time"]) * 1000, q["sql"]) for q in queries.captured_queries]
    timed.sql_ms.append(sum(t for t, _ in times))
    choices = sum(t for t, sql in times if CHOICES_SQL in sql)
    timed.choices_ms.append(choices)
    timed.rest_sql_ms.append(timed.sql_ms[-1] - choices)
    slowest = max(times, default=(0.0, ""))
    if slowest[0] > timed.slowest_query[0]:
        timed.slowest_query = slowest


def _cursor_at(moment: datetime) -> str:
    micros = int(moment.timestamp()) * 1_000_000 + moment.microsecond
    return f"{micros}.chatcmpl-ffffffffffffffffffffffff"


def runs_list_cases(the_plan: Plan, draw: random.Random) -> list[tuple[str, Callable[[], str]]]:
    """Each case: its label, and a maker of its next query string (another value each time)."""
    from accounts.models import ApiKey, Organization

    organizations = list(
        Organization.objects.filter(name__startswith="scale-org-").values_list("pk", flat=True)
    )
    keys = list(ApiKey.objects.filter(prefix__startswith="mk-scale").values_list("pk", flat=True))
    sessions = the_plan.runs // SESSION_RUNS
    start = the_plan.end - timedelta(days=the_plan.days)
    span_s = the_plan.days * 86_400

    def moment() -> datetime:
        return start + timedelta(seconds=draw.uniform(0, span_s - 3600))

    def session() -> int:
        # A session's number is (run number // 400) * 20 + 0..19: any below the last is stored.
        return draw.randrange(0, sessions - INTERLEAVED)

    def hour_window() -> str:
        since = moment()
        until = since + timedelta(hours=1)
        return f"since={since:%Y-%m-%dT%H:%M}&until={until:%Y-%m-%dT%H:%M}"

    return [
        ("first page", lambda: ""),
        ("deep page (a cursor anywhere in 60 days)", lambda: f"before={_cursor_at(moment())}"),
        ("organization", lambda: f"organization={draw.choice(organizations)}"),
        ("model", lambda: f"model={draw.choice(MODELS)[0]}"),
        (
            "organization + model",
            lambda: f"organization={draw.choice(organizations)}&model={draw.choice(MODELS)[0]}",
        ),
        ("key", lambda: f"key={draw.choice(keys)}"),
        ("end user (~500 runs)", lambda: f"end_user=user-{draw.randrange(END_USERS)}"),
        (
            "status (failed, refused, stopped, cancelled)",
            lambda: f"status={draw.choice(['failed', 'refused', 'stopped', 'cancelled'])}",
        ),
        ("session (~20 runs)", lambda: f"session=sess-{session()}"),
        ("time range (an hour)", hour_window),
        (
            "time range + organization",
            lambda: f"{hour_window()}&organization={draw.choice(organizations)}",
        ),
        ("search: a common word (rank 2-20)", lambda: f"q={word_of_rank(draw.randint(2, 20))}"),
        (
            "search: a mid word (rank 100-1,000)",
            lambda: f"q={word_of_rank(draw.randint(100, 1000))}",
        ),
        (
            "search: a rare word (rank 5,000-20,000)",
            lambda: f"q={word_of_rank(draw.randint(5000, 20000))}",
        ),
        ("search: a ticket (one session)", lambda: f"q=t{session()}"),
        (
            "search: two words (mid + rare)",
            lambda: (
                f"q={word_of_rank(draw.randint(100, 1000))}+"
                f"{word_of_rank(draw.randint(5000, 20000))}"
            ),
        ),
        ("search: no match", lambda: f"q=zq{draw.randrange(10**6)}x"),
        (
            "search: a mid word + organization",
            lambda: (
                f"q={word_of_rank(draw.randint(100, 1000))}"
                f"&organization={draw.choice(organizations)}"
            ),
        ),
    ]


def measure_runs_list(the_plan: Plan, samples: int, client: Client) -> list[Timed]:
    draw = random.Random(11)
    results = []
    for label, query in runs_list_cases(the_plan, draw):
        timed = Timed(f"runs list: {label}", RUNS_LIST_TARGET_MS)
        for _ in range(samples):
            _time_page(client, f"/dashboard/runs/?{query()}", timed)
        print(
            f"  {timed.label:<58} p50 {timed.p50:7.1f}  p95 {timed.p95:7.1f} ms"
            f"  (SQL p95 {timed.sql_p95:6.1f} ms: end-user choices {timed.choices_p95:6.1f},"
            f" the rest {timed.rest_sql_p95:6.1f})",
            flush=True,
        )
        results.append(timed)
    return results


def sample_runs(count: int, *, streams: bool | None) -> list[str]:
    """`count` stored runs drawn from every day (a sample of the table's pages)."""
    from django.db import connection

    where = "" if streams is None else f" AND stream IS {'TRUE' if streams else 'FALSE'}"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM telemetry_run TABLESAMPLE SYSTEM (0.1) REPEATABLE (7)"
            f" WHERE status = 'completed'{where} LIMIT %s",
            [count * 20],
        )
        ids = [row[0] for row in cursor.fetchall()]
    random.Random(5).shuffle(ids)
    return ids[:count]


def measure_run_page(samples: int, client: Client) -> Timed:
    timed = Timed("run page (streams and JSON runs)", RUN_PAGE_TARGET_MS)
    ids = sample_runs(samples // 2, streams=True) + sample_runs(
        samples - samples // 2, streams=False
    )
    for run_id in ids:
        _time_page(client, f"/dashboard/runs/{run_id}/", timed)
    print(
        f"  {timed.label:<58} p50 {timed.p50:7.1f}  p95 {timed.p95:7.1f} ms"
        f"  (SQL p95 {timed.sql_p95:6.1f} ms)",
        flush=True,
    )
    return timed


def measure_spend(samples: int, client: Client) -> list[Timed]:
    from accounts.models import Organization

    organizations = list(
        Organization.objects.filter(name__startswith="scale-org-").values_list("pk", flat=True)
    )
    draw = random.Random(3)
    results = []
    queries: list[tuple[str, Callable[[], str]]] = [
        ("Spend, 30 days, every organization", lambda: "range=30d"),
        (
            "Spend, 30 days, one organization",
            lambda: f"range=30d&organization={draw.choice(organizations)}",
        ),
    ]
    for label, query in queries:
        timed = Timed(label, SPEND_TARGET_MS)
        for _ in range(samples):
            _time_page(client, f"/dashboard/spend/?{query()}", timed)
        print(
            f"  {timed.label:<58} p50 {timed.p50:7.1f}  p95 {timed.p95:7.1f} ms"
            f"  (SQL p95 {timed.sql_p95:6.1f} ms)",
            flush=True,
        )
        results.append(timed)
    return results


def staff_client() -> Client:
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(User.objects.get(username="scale-staff"))
    return client


def roll_up(days: int) -> float:
    """Beat's rollups and breakdowns of the last `days` days (what Spend reads); return seconds."""
    from django.db import connection

    from telemetry.services.rollups import usage_rollups_refresh

    began = time.perf_counter()
    now = datetime.now(UTC)
    usage_rollups_refresh(since=now - timedelta(days=days), until=now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE telemetry_usagerollup")
        cursor.execute("ANALYZE telemetry_usagebreakdown")
    return time.perf_counter() - began


def beat_refresh() -> float:
    """Beat's refresh of the rollups (the last two hours, every five minutes); return ms."""
    from telemetry.services.rollups import usage_rollups_refresh

    now = datetime.now(UTC)
    began = time.perf_counter()
    usage_rollups_refresh(since=now - timedelta(hours=2), until=now)
    ms = (time.perf_counter() - began) * 1000
    print(f"  {'beat: rollups of the last 2 hours (every 5 min)':<58} {ms:7.0f} ms", flush=True)
    return ms
