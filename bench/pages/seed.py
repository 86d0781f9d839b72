"""A million runs for the dashboard's pages: the SQL that seeds them in one statement, the
database they go in, and the organizations and keys they belong to.

The runs: 20 organizations, 100 keys, 5,000 end users, 50,000 sessions, 5 models, 30 days, 2%
errors and ~1% stopped; each with a prompt and a reply text — a system prompt of five (one names
"billing"), a ticket number `t<n>` (50,000 of them: ~20 runs each) and 30 words in the prompt,
50 in the reply, drawn from 10,000 words `w<k>` with a skew (`k = 10000 * u**3`): `w0` is in most
runs, `w9999` in ~0.2% of them.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import dj_database_url
import psycopg

RUNS = 1_000_000

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


def bench_database_url(name: str) -> str:
    """The URL of database `name` on DATABASE_URL's server (the local Postgres by default),
    created if missing."""
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
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            admin.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + f"/{name}"


def setup_django(database: str) -> None:
    """Django on `database`, migrated."""
    os.environ["DATABASE_URL"] = bench_database_url(database)
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


def median_ms(action: Callable[[], object], tries: int) -> float:
    """The median wall time of `action` over `tries`, in ms, after one untimed call (it warms the
    cache and the connection)."""
    action()
    times = []
    for _ in range(tries):
        began = time.perf_counter()
        action()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)
