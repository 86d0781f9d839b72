"""How fast the dashboard's Spend page answers with 1,000,000 runs in Postgres.

Seeds its own database (`spend_page_bench`) with the runs list bench's million runs (20
organizations, 100 keys, 5,000 end users, 5 models, 30 days, 2% errors; bench/pages/seed.py),
once, rolls them up by hour and sums them per breakdown (telemetry/services/breakdowns.py; no
beat: the last two hours are read from the runs, as on a server whose rollups were never
refreshed in the current hour). Then times, as the median of a few tries, the refresh beat runs
every five minutes, each of the page's queries and the whole page through Django, for the last
24 hours and 30 days, every organization and one.

    .venv/bin/python -m bench pages spend            # seed if needed, then time
    .venv/bin/python -m bench pages spend --reseed   # drop the runs and seed again

Writes bench/results/spend.md.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial

from bench.commands import program
from bench.harness.results import recorded

from .seed import RUNS, SEED_SQL, median_ms, seed_owners, setup_django

BENCH_DB = "spend_page_bench"
TRIES = 5


def seed(*, reseed: bool, runs: int = RUNS) -> int:
    """The runs list bench's million runs (its SQL, organizations and keys)."""
    from django.db import connection

    from telemetry.models import Run

    have = 0 if reseed else Run.objects.count()
    if have >= runs:
        return have
    seed_owners()
    began = time.perf_counter()
    with connection.cursor() as cursor:
        # CASCADE: the runs' image links and the rollups refer to the runs' tables.
        cursor.execute(
            "TRUNCATE telemetry_runchunk, telemetry_run, telemetry_usagerollup,"
            " telemetry_usagebreakdown CASCADE"
        )
        cursor.execute(SEED_SQL, {"runs": runs})
        cursor.execute("ANALYZE telemetry_run")
    print(f"seeded {runs:,} runs in {time.perf_counter() - began:.1f} s")
    return runs


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n")[0])
    parser.add_argument("--reseed", action="store_true", help="drop the runs and seed again")
    parser.add_argument("--runs", type=int, default=RUNS, help="how many runs to seed")
    args = parser.parse_args(argv)
    setup_django(BENCH_DB)
    with recorded("spend", "The Spend page at 1,000,000 runs"):
        time_the_page(seed(reseed=args.reseed, runs=args.runs))


def time_the_page(count: int) -> None:
    """Roll up the runs and sum their breakdowns if not done yet, then print the median time of
    the refresh, of each of the page's queries and of the whole page."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from accounts.models import Organization
    from dashboard.selectors.spend import (
        SpendFilters,
        errors_by_code,
        histogram,
        spend_chart,
        spend_totals,
        usage_by,
    )
    from dashboard.services import usage_rollups_refresh_without_beat
    from telemetry.models import UsageBreakdown, UsageRollup
    from telemetry.services.breakdowns import usage_breakdowns_backfill
    from telemetry.services.rollups import usage_rollups_refresh

    now = timezone.now()
    if not UsageRollup.objects.exists():
        began = time.perf_counter()
        usage_rollups_refresh(since=now - timedelta(days=31), until=now)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE telemetry_usagerollup")
        print(f"rolled up in {time.perf_counter() - began:.1f} s")
    if not UsageBreakdown.objects.exists():  # rollups made before breakdowns: as the migration does
        began = time.perf_counter()
        usage_breakdowns_backfill()
        print(f"breakdowns summed in {time.perf_counter() - began:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE telemetry_usagebreakdown")  # autovacuum's job on a server
    print(f"{count:,} runs, {UsageRollup.objects.count():,} rollup rows in {BENCH_DB}")
    # The refresh beat runs every five minutes (the last two hours, and their days' breakdowns).
    ms = median_ms(lambda: usage_rollups_refresh(since=now - timedelta(hours=2), until=now), TRIES)
    print(f"rollup refresh of the last 2 hours (beat's, every 5 min): {ms:.0f} ms")
    # The pages' in-process catch-up (the embedded default's; its first looks back 7 days)
    # before timing, then what autovacuum would do on a server (some test machines run
    # Postgres with it off): without, each run leaves the recomputed rows' dead tuples behind
    # and the timings drift up from run to run.
    began = time.perf_counter()
    usage_rollups_refresh_without_beat()
    with connection.cursor() as cursor:
        for table in ("telemetry_usagerollup", "telemetry_usagebreakdown"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    print(f"in-process catch-up, then VACUUM ANALYZE: {time.perf_counter() - began:.1f} s")

    organization = Organization.objects.get(name="bench-org-07")
    worst = 0.0
    for span, bucket in ((timedelta(hours=24), "hour"), (timedelta(days=30), "day")):
        for who, org in (("every organization", None), ("one organization", organization.pk)):
            filters = SpendFilters(since=now - span, until=now, organization_id=org, bucket=bucket)
            print(f"last {span.days or 1} {'days' if span.days else 'day'}, {who}:")
            top = usage_by(filters, "end_user")
            cases: list[tuple[str, Callable[[], object]]] = [
                ("totals", partial(spend_totals, filters)),
                ("top end users (5,000)", partial(usage_by, filters, "end_user")),
                ("top keys", partial(usage_by, filters, "key")),
                ("end-user spend over time", partial(spend_chart, filters, "end_user", top)),
                ("errors by code", partial(errors_by_code, filters)),
                ("latency histogram", partial(histogram, filters, "latency")),
            ]
            for label, action in cases:
                ms = median_ms(action, TRIES)
                worst = max(worst, ms)
                print(f"  {label:<30} {ms:8.1f} ms")

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(User.objects.get(username="bench-staff"))
    for query in ("range=24h", "range=30d", f"range=30d&organization={organization.pk}"):
        ms = median_ms(partial(client.get, f"/dashboard/spend/?{query}"), TRIES)
        print(f"whole page /dashboard/spend/?{query}: {ms:.0f} ms")
    print(f"slowest query: {worst:.1f} ms")
