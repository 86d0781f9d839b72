"""How fast the dashboard's Spend page answers with 1,000,000 runs in Postgres.

Seeds its own database (`spend_page_bench`) with the runs list bench's million runs (20
organizations, 100 keys, 5,000 end users, 5 models, 30 days, 2% errors; `runs_list_bench.py`),
once, rolls them up by hour and slices them (telemetry/services/slices.py; no beat: the last
two hours are read from the runs, as on a server whose rollups were never refreshed in the
current hour). Then times, as the median of a few tries, the refresh beat runs every five
minutes, each of the page's queries and the whole page through Django, for the last 24 hours
and 30 days, every organization and one.

    .venv/bin/python bench/spend_bench.py            # seed if needed, then time
    .venv/bin/python bench/spend_bench.py --reseed   # drop the runs and seed again
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import runs_list_bench as seeding  # noqa: E402  (bench/ is on sys.path when run as a script)

seeding.BENCH_DB = "spend_page_bench"
TRIES = 5


def median_ms(action: Callable[[], object]) -> float:
    action()  # warm the cache and the connection
    times = []
    for _ in range(TRIES):
        began = time.perf_counter()
        action()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def seed(*, reseed: bool) -> int:
    """The runs list bench's million runs (its SQL, organizations and keys)."""
    from django.db import connection

    from telemetry.models import Run

    have = 0 if reseed else Run.objects.count()
    if have >= seeding.RUNS:
        return have
    seeding.seed_owners()
    began = time.perf_counter()
    with connection.cursor() as cursor:
        # CASCADE: the runs' image links and the rollups refer to the runs' tables.
        cursor.execute(
            "TRUNCATE telemetry_runchunk, telemetry_run, telemetry_usagerollup,"
            " telemetry_usageslice CASCADE"
        )
        cursor.execute(seeding.SEED_SQL, {"runs": seeding.RUNS})
        cursor.execute("ANALYZE telemetry_run")
    print(f"seeded {seeding.RUNS:,} runs in {time.perf_counter() - began:.1f} s")
    return seeding.RUNS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reseed", action="store_true", help="drop the runs and seed again")
    args = parser.parse_args()
    seeding.setup_django()
    count = seed(reseed=args.reseed)

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
    from telemetry.models import UsageRollup, UsageSlice
    from telemetry.services.rollups import usage_rollups_refresh
    from telemetry.services.slices import usage_slices_backfill

    now = timezone.now()
    if not UsageRollup.objects.exists():
        began = time.perf_counter()
        usage_rollups_refresh(since=now - timedelta(days=31), until=now)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE telemetry_usagerollup")
        print(f"rolled up in {time.perf_counter() - began:.1f} s")
    if not UsageSlice.objects.exists():  # rollups made before slices: as the migration does
        began = time.perf_counter()
        usage_slices_backfill()
        print(f"sliced in {time.perf_counter() - began:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE telemetry_usageslice")  # autovacuum's job on a server
    print(f"{count:,} runs, {UsageRollup.objects.count():,} rollup rows in {seeding.BENCH_DB}")
    # The refresh beat runs every five minutes (the last two hours, and their days' slices).
    ms = median_ms(lambda: usage_rollups_refresh(since=now - timedelta(hours=2), until=now))
    print(f"rollup refresh of the last 2 hours (beat's, every 5 min): {ms:.0f} ms")
    # The pages' in-process catch-up (the embedded default's; its first looks back 7 days)
    # before timing, then what autovacuum would do on a server (some test machines run
    # Postgres with it off): without, each run leaves the recomputed rows' dead tuples behind
    # and the timings drift up from run to run.
    began = time.perf_counter()
    usage_rollups_refresh_without_beat()
    with connection.cursor() as cursor:
        for table in ("telemetry_usagerollup", "telemetry_usageslice"):
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
                ("totals", lambda f=filters: spend_totals(f)),
                ("top end users (5,000)", lambda f=filters: usage_by(f, "end_user")),
                ("top keys", lambda f=filters: usage_by(f, "key")),
                (
                    "end-user spend over time",
                    lambda f=filters, t=top: spend_chart(f, "end_user", t),
                ),
                ("errors by code", lambda f=filters: errors_by_code(f)),
                ("latency histogram", lambda f=filters: histogram(f, "latency")),
            ]
            for label, action in cases:
                ms = median_ms(action)
                worst = max(worst, ms)
                print(f"  {label:<30} {ms:8.1f} ms")

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(User.objects.get(username="bench-staff"))
    for query in ("range=24h", "range=30d", f"range=30d&organization={organization.pk}"):
        ms = median_ms(lambda q=query: client.get(f"/dashboard/spend/?{q}"))
        print(f"whole page /dashboard/spend/?{query}: {ms:.0f} ms")
    print(f"slowest query: {worst:.1f} ms")


if __name__ == "__main__":
    main()
