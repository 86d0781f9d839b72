"""How fast the dashboard's runs list answers with 1,000,000 runs in Postgres.

Seeds a separate database (`mortar_bench_runs_list`, or `MORTAR_BENCH_RUNS_DB`, on the server
of DATABASE_URL, default the local Postgres) with a million runs in one `generate_series` INSERT
(bench/pages/seed.py says what they hold) once; later runs reuse it. Then times, as the median
of several tries, the list's query (`runs_page`) for common filters, free-text searches alone and
with filters, and a deep page, and the whole page through Django (middleware, staff check, the
filters' choices, template). Target: the runs list under 200 ms, free-text search included.

    .venv/bin/python -m bench pages runs-list            # seed if needed, then time
    .venv/bin/python -m bench pages runs-list --reseed   # drop the runs and seed again

Writes bench/results/runs-list.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING

from bench.commands import program
from bench.harness.results import recorded

from .seed import RUNS, SEED_SQL, median_ms, seed_owners, setup_django

if TYPE_CHECKING:
    from accounts.models import Organization
    from dashboard.selectors.runs import Cursor, RunFilters

# What is timed: its label, the list's filters, and the cursor of the page (None: the first).
Case = tuple[str, "RunFilters", "Cursor | None"]
BENCH_DB = os.environ.get("MORTAR_BENCH_RUNS_DB", "mortar_bench_runs_list")
TRIES = 9


def seed(*, reseed: bool, runs: int = RUNS) -> int:
    from django.db import connection

    from telemetry.models import Run

    if reseed:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE telemetry_run CASCADE")  # chunks, images, holds
    have = Run.objects.count()
    if have >= runs and Run.objects.exclude(prompt_text="").exists():
        return have  # (seeded before runs had text: seed again)
    seed_owners()
    # The migration that made the search indexes: its CREATE and DROP statements.
    run_search = importlib.import_module("telemetry.migrations.0015_run_search")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE telemetry_run CASCADE")  # chunks, images, holds
        # The search indexes are built once after the rows are in, not grown row by row.
        for statement in run_search.DROP:
            cursor.execute(statement)
        cursor.execute(SEED_SQL, {"runs": runs})
        seeded = time.perf_counter()
        cursor.execute("SET maintenance_work_mem = '512MB'")
        for statement in run_search.CREATE:
            cursor.execute(statement)
        cursor.execute("ANALYZE telemetry_run")
    print(
        f"seeded {runs:,} runs in {seeded - started:.1f} s,"
        f" built the search indexes in {time.perf_counter() - seeded:.1f} s"
    )
    return runs


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n")[0])
    parser.add_argument("--reseed", action="store_true", help="drop the runs and seed again")
    parser.add_argument("--runs", type=int, default=RUNS, help="how many runs to seed")
    args = parser.parse_args(argv)
    setup_django(BENCH_DB)
    count = seed(reseed=args.reseed, runs=args.runs)

    from accounts.models import ApiKey, Organization
    from dashboard.selectors.runs import Cursor, RunFilters
    from telemetry.models import Run

    organization = Organization.objects.get(name="bench-org-07")
    key = ApiKey.objects.filter(organization=organization).first()
    assert key is not None, "the seed gives every organization keys"
    middle = Run.objects.order_by("-accepted_at", "-id").values("accepted_at", "id")[count // 2]
    deep = Cursor(accepted_at=middle["accepted_at"], run_id=middle["id"])
    cases: list[Case] = [
        ("first page, no filter", RunFilters(), None),
        ("organization", RunFilters(organization_id=organization.pk), None),
        (
            "organization + model",
            RunFilters(organization_id=organization.pk, model="mistral-7b"),
            None,
        ),
        (
            "organization + model, no match",
            RunFilters(organization_id=organization.pk, model="gpt-none"),
            None,
        ),
        (
            "organization + failed",
            RunFilters(organization_id=organization.pk, status="failed"),
            None,
        ),
        (
            "organization + stopped + length",
            RunFilters(organization_id=organization.pk, status="stopped", finish_reason="length"),
            None,
        ),
        ("key", RunFilters(api_key_id=key.pk), None),
        ("status failed", RunFilters(status="failed"), None),
        ("status stopped (~1%)", RunFilters(status="stopped"), None),
        ("status cancelled, no match", RunFilters(status="cancelled"), None),
        (
            "organization + in progress, no match",
            RunFilters(organization_id=organization.pk, status="in_progress"),
            None,
        ),
        ("finish reason length", RunFilters(finish_reason="length"), None),
        ("deployment", RunFilters(deployment="vllm-b"), None),
        (
            "organization + session",
            RunFilters(organization_id=organization.pk, session="sess-4207"),
            None,
        ),
        ("session alone (~20 runs)", RunFilters(session="sess-4207"), None),
        ("end user alone (~200 runs)", RunFilters(end_user="user-4207"), None),
        ("end user, no match", RunFilters(end_user="nobody"), None),
        ("page 10,000 (cursor mid-table)", RunFilters(), deep),
        (
            "one day, organization",
            RunFilters(
                organization_id=organization.pk,
                since=middle["accepted_at"] - timedelta(hours=12),
                until=middle["accepted_at"] + timedelta(hours=12),
            ),
            None,
        ),
    ]
    failed = RunFilters(organization_id=organization.pk, status="failed")
    searches: list[Case] = [
        ("search: a word in most runs (w0)", RunFilters(search="w0"), None),
        ("search: system prompt word (~20%)", RunFilters(search="billing"), None),
        ("search: w50", RunFilters(search="w50"), None),
        ("search: w1000", RunFilters(search="w1000"), None),
        ("search: w9999 (rarest drawn word)", RunFilters(search="w9999"), None),
        ("search: a ticket (~20 runs)", RunFilters(search="t4207"), None),
        ("search: no match", RunFilters(search="zebra"), None),
        ("search: two words (w3 w5000)", RunFilters(search="w3 w5000"), None),
        ("search: a phrase", RunFilters(search='"deployment pipeline"'), None),
        ("search: w0 or w9999", RunFilters(search="w0 or w9999"), None),
        (
            "search: w1000 + organization",
            RunFilters(organization_id=organization.pk, search="w1000"),
            None,
        ),
        ("search: w0 + org + failed", replace(failed, search="w0"), None),
        ("search: w1000 + org + failed", replace(failed, search="w1000"), None),
        ("search: w9999 + end user", RunFilters(end_user="user-4207", search="w9999"), None),
        ("search: w0, page 10,000", RunFilters(search="w0"), deep),
        ("search: w1000, page 10,000", RunFilters(search="w1000"), deep),
    ]
    ranges: list[Case] = [
        ("error code", RunFilters(error_code="upstream_error"), None),
        ("error code, no match", RunFilters(error_code="overloaded"), None),
        ("cost under $0.0001 (~10%)", RunFilters(cost_max=Decimal("0.0001")), None),
        ("cost $0.01 and up (none)", RunFilters(cost_min=Decimal("0.01")), None),
        ("latency 1 s and up (~22%)", RunFilters(latency_min=timedelta(seconds=1)), None),
        ("latency 5 s and up (none)", RunFilters(latency_min=timedelta(seconds=5)), None),
        (
            "organization + latency 5 s and up",
            RunFilters(organization_id=organization.pk, latency_min=timedelta(seconds=5)),
            None,
        ),
    ]
    with recorded("runs-list", "The runs list at 1,000,000 runs"):
        time_the_list(count, cases + searches + ranges, organization)


def time_the_list(count: int, cases: list[Case], organization: Organization) -> None:
    """Print the median time of each case's query, then of the whole page through Django."""
    from django.contrib.auth.models import User
    from django.test import Client

    from dashboard.selectors.catalog import end_user_names
    from dashboard.selectors.runs import runs_page

    print(f"{count:,} runs in {BENCH_DB}; median of {TRIES} tries, 50 rows a page")
    worst = 0.0
    for label, filters, before in cases:
        ms = median_ms(partial(runs_page, filters, before=before), TRIES)
        worst = max(worst, ms)
        print(f"  {label:<40} {ms:8.1f} ms")

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(User.objects.get(username="bench-staff"))
    page_ms = median_ms(lambda: client.get("/dashboard/runs/"), TRIES)
    filtered_ms = median_ms(
        lambda: client.get(f"/dashboard/runs/?organization={organization.pk}&status=failed"),
        TRIES,
    )
    end_user_ms = median_ms(lambda: client.get("/dashboard/runs/?end_user=user-4207"), TRIES)
    search_ms = median_ms(lambda: client.get("/dashboard/runs/?q=w1000"), TRIES)
    choices_ms = median_ms(end_user_names, TRIES)
    print(f"  {'whole page /dashboard/runs/':<40} {page_ms:8.1f} ms")
    print(f"  {'whole page, end user':<40} {end_user_ms:8.1f} ms")
    print(f"  {'whole page, organization + failed':<40} {filtered_ms:8.1f} ms")
    print(f"  {'whole page, search w1000':<40} {search_ms:8.1f} ms")
    print(f"  {'  of which the end-user choices':<40} {choices_ms:8.1f} ms")
    print(f"slowest list query: {worst:.1f} ms (target < 200 ms)")
