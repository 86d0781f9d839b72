"""How fast the dashboard's runs list answers with 1,000,000 runs in Postgres.

Seeds a separate database (`mortar_bench_runs_list`, or `MORTAR_BENCH_RUNS_DB`, on the server
of DATABASE_URL, default the local Postgres) with a million runs in one `generate_series` INSERT
— 20 organizations, 100 keys, 5,000 end users, 50,000 sessions, 30 days, each run with a prompt
and a reply text (below) — once; later runs reuse it. Then times, as the median of several tries,
the list's query (`runs_page`) for common filters, free-text searches alone and with filters, and
a deep page, and the whole page through Django (middleware, staff check, the filters' choices,
template).

The texts: a system prompt of five (one names "billing"), a ticket number `t<n>` (50,000 of
them: ~20 runs each) and 30 words in the prompt, 50 in the reply, drawn from 10,000 words `w<k>`
with a skew (`k = 10000 * u**3`): `w0` is in most runs, `w9999` in ~0.2% of them.

    .venv/bin/python bench/runs_list_bench.py            # seed if needed, then time
    .venv/bin/python bench/runs_list_bench.py --reseed   # drop the runs and seed again

Target (issues 6 and 18): the runs list under 200 ms, free-text search included.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import dj_database_url
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# writer_bench.py uses mortar_bench
BENCH_DB = os.environ.get("MORTAR_BENCH_RUNS_DB", "mortar_bench_runs_list")
RUNS = 1_000_000
TRIES = 9
# Indexes the runs list might need beyond the migrations': `--proposed-indexes` builds them in
# the bench database only; without it they are dropped. None now: the two measured here
# (end user, organization + model) went into telemetry migration 0004, and this bench dropped
# them again unless asked to build them, so it measured less than what is deployed.
PROPOSED_INDEXES: dict[str, str] = {}

SEED_SQL = """
INSERT INTO telemetry_run (
    id, organization_id, api_key_id, request_id, end_user, session, model, deployment, stream,
    status, http_status, error_code, error_message, request_bytes, request_truncated,
    accepted_at, first_token_at, finished_at, finish_reason, max_tokens, prompt_tokens,
    completion_tokens, total_tokens, usage_source, chunk_count, cached_tokens, cost,
    dedupe_role, dedupe_leader, replica, session_kept, worker, prompt_text, reply_text
)
SELECT
    'chatcmpl-' || lpad(to_hex(g), 24, '0'),
    orgs[1 + h.o %% 20],
    keys[1 + (h.o %% 20) + 20 * (h.k %% 5)],
    'req_' || g,
    'user-' || (h.u %% 5000),
    'sess-' || (h.s %% 50000),
    (ARRAY['Qwen/Qwen2.5-7B-Instruct', 'qwen-upstream', 'llama-3.1-8b', 'mistral-7b',
           'slow-scripted'])[1 + h.m %% 5],
    (ARRAY['scripted', 'vllm-a', 'vllm-b', 'ollama', 'scripted-slow'])[1 + h.m %% 5],
    true,
    CASE WHEN h.f %% 50 = 0 THEN 'failed' WHEN h.f %% 97 = 0 THEN 'stopped' ELSE 'completed' END,
    CASE WHEN h.f %% 50 = 0 THEN 502 ELSE 200 END,
    CASE WHEN h.f %% 50 = 0 THEN 'upstream_error' ELSE '' END,
    '',
    400, false,
    t,
    t + interval '80 milliseconds',
    t + (300 + g %% 900) * interval '1 millisecond',
    CASE WHEN h.f %% 50 = 0 THEN '' WHEN h.f %% 7 = 0 THEN 'length' ELSE 'stop' END,
    1024, 200 + g %% 800, 50 + g %% 300, 250 + g %% 800 + g %% 300,
    CASE WHEN g %% 3 = 0 THEN 'estimate' ELSE 'upstream' END,
    12, (g %% 4) * 64, (g %% 1000) * 0.000001,
    '', '', 'http://10.0.0.' || (1 + g %% 4) || ':8000/v1', g %% 10 <> 0, '',
    (ARRAY['You are a support assistant for the billing platform. Be brief.',
           'You answer questions about the deployment pipeline.',
           'Summarize the conversation for the on-call engineer.',
           'Translate the customer message into plain English.',
           'You are a coding assistant; answer with code first.'])[1 + h.m %% 5]
        || E'\n' || 'Ticket t' || (h.s %% 50000) || ': ' || words.prompt,
    words.reply
FROM generate_series(1, %(runs)s) AS g,
     LATERAL (SELECT now() - g * interval '2592 milliseconds' AS t) AS moment,
     -- Independent pseudo-random draws per column, so filters combine as in real traffic.
     LATERAL (
         SELECT abs(hashtext('o' || g)) AS o, abs(hashtext('k' || g)) AS k,
                abs(hashtext('u' || g)) AS u, abs(hashtext('s' || g)) AS s,
                abs(hashtext('m' || g)) AS m, abs(hashtext('f' || g)) AS f
     ) AS h,
     LATERAL (
         SELECT string_agg(w, ' ') FILTER (WHERE i <= 30) AS prompt,
                string_agg(w, ' ') FILTER (WHERE i > 30) AS reply
         FROM (
             SELECT i, 'w' || floor(10000 * power(
                 (abs(hashtext(g || '-' || i)) %% 1000000) / 1000000.0, 3))::int AS w
             FROM generate_series(1, 80) AS i
         ) AS drawn
     ) AS words,
     (SELECT array_agg(id ORDER BY id) AS orgs FROM gateway_organization) AS o,
     (SELECT array_agg(id ORDER BY id) AS keys FROM gateway_apikey) AS k
"""


def bench_database_url() -> str:
    base = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    config = dj_database_url.parse(base)
    admin = psycopg.connect(
        host=config["HOST"],
        port=config["PORT"] or 5432,
        user=config["USER"],
        password=config["PASSWORD"] or None,
        dbname=config["NAME"],
        autocommit=True,
    )
    with admin:
        exists = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]
        ).fetchone()
        if not exists:
            admin.execute(f'CREATE DATABASE "{BENCH_DB}"')
    return base.rsplit("/", 1)[0] + f"/{BENCH_DB}"


def setup_django() -> None:
    os.environ["DATABASE_URL"] = bench_database_url()
    os.environ.pop("REDIS_URL", None)  # the list needs none; keep the bench self-contained
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed_owners() -> None:
    """The organizations and keys the seeded runs belong to (`SEED_SQL` numbers them), and a
    staff user to read the pages as."""
    from django.contrib.auth.models import User

    from accounts.models import ApiKey, Organization

    organizations = [
        Organization.objects.get_or_create(name=f"bench-org-{i:02d}")[0] for i in range(20)
    ]
    if ApiKey.objects.count() < 100:
        ApiKey.objects.bulk_create(
            ApiKey(
                organization=organizations[i % 20],
                name=f"bench-{i}",
                prefix=f"mk-bench{i:03d}",
                digest=f"{i:064x}",
            )
            for i in range(100)
        )
    if not User.objects.filter(username="bench-staff").exists():
        User.objects.create_user("bench-staff", is_staff=True)


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


def proposed_indexes(*, build: bool) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for name, columns in PROPOSED_INDEXES.items():
            if build:
                cursor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON telemetry_run {columns}")
            else:
                cursor.execute(f"DROP INDEX IF EXISTS {name}")
        cursor.execute("ANALYZE telemetry_run")
    print("with the proposed indexes" if build else "with the indexes of the migrations only")


def median_ms(action: Callable[[], object]) -> float:
    action()  # warm the cache and the connection
    times = []
    for _ in range(TRIES):
        began = time.perf_counter()
        action()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reseed", action="store_true", help="drop the runs and seed again")
    parser.add_argument(
        "--proposed-indexes",
        action="store_true",
        help="build PROPOSED_INDEXES first (else drop them): measure with and without",
    )
    parser.add_argument("--runs", type=int, default=RUNS, help="how many runs to seed")
    args = parser.parse_args()
    setup_django()
    count = seed(reseed=args.reseed, runs=args.runs)
    proposed_indexes(build=args.proposed_indexes)

    from django.contrib.auth.models import User
    from django.test import Client

    from accounts.models import ApiKey, Organization
    from dashboard.selectors.catalog import end_user_names
    from dashboard.selectors.runs import Cursor, RunFilters, runs_page
    from telemetry.models import Run

    organization = Organization.objects.get(name="bench-org-07")
    key = ApiKey.objects.filter(organization=organization).first()
    middle = Run.objects.order_by("-accepted_at", "-id").values("accepted_at", "id")[count // 2]
    deep = Cursor(accepted_at=middle["accepted_at"], run_id=middle["id"])
    cases: list[tuple[str, RunFilters, Cursor | None]] = [
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
    searches: list[tuple[str, RunFilters, Cursor | None]] = [
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
    ranges: list[tuple[str, RunFilters, Cursor | None]] = [
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
    print(f"{count:,} runs in {BENCH_DB}; median of {TRIES} tries, 50 rows a page")
    worst = 0.0
    for label, filters, before in cases + searches + ranges:
        ms = median_ms(lambda f=filters, b=before: runs_page(f, before=b))
        worst = max(worst, ms)
        print(f"  {label:<40} {ms:8.1f} ms")

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(User.objects.get(username="bench-staff"))
    page_ms = median_ms(lambda: client.get("/dashboard/runs/"))
    filtered_ms = median_ms(
        lambda: client.get(f"/dashboard/runs/?organization={organization.pk}&status=failed")
    )
    end_user_ms = median_ms(lambda: client.get("/dashboard/runs/?end_user=user-4207"))
    search_ms = median_ms(lambda: client.get("/dashboard/runs/?q=w1000"))
    choices_ms = median_ms(end_user_names)
    print(f"  {'whole page /dashboard/runs/':<40} {page_ms:8.1f} ms")
    print(f"  {'whole page, end user':<40} {end_user_ms:8.1f} ms")
    print(f"  {'whole page, organization + failed':<40} {filtered_ms:8.1f} ms")
    print(f"  {'whole page, search w1000':<40} {search_ms:8.1f} ms")
    print(f"  {'  of which the end-user choices':<40} {choices_ms:8.1f} ms")
    print(f"slowest list query: {worst:.1f} ms (target < 200 ms)")


if __name__ == "__main__":
    main()
