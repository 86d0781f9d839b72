"""Finished runs written straight to the run store, for the tests of what reads it (the
dashboard's selectors, the rollups and their breakdowns)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection
from django.db.models import QuerySet

from accounts.models import Organization
from telemetry.models import Run

# One counter for every test module: ids never collide within a run of the suite, and a
# test's runs sort by id in the order it made them.
_ids = itertools.count(1)


def finished_run(
    organization: Organization,
    accepted_at: datetime,
    *,
    latency_ms: int = 500,
    ttft_ms: int = 50,
    **fields: object,
) -> Run:
    """A completed run accepted at `accepted_at`: 100 prompt and 10 completion tokens for
    $0.001, its first token after `ttft_ms` and its last after `latency_ms`; `fields` override."""
    values: dict[str, object] = {
        "status": Run.Status.COMPLETED,
        "http_status": 200,
        "finished_at": accepted_at + timedelta(milliseconds=latency_ms),
        "first_token_at": accepted_at + timedelta(milliseconds=ttft_ms),
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "cached_tokens": 0,
        "cost": Decimal("0.001"),
        **fields,
    }
    return Run.objects.create(
        id=f"chatcmpl-{next(_ids):024x}",
        organization=organization,
        accepted_at=accepted_at,
        **values,
    )


def query_plan(query: QuerySet, *, ordered_index_scans: bool = True) -> str:
    """Postgres's plan for `query`, with sequential scans ruled out: the tests' tables are tiny,
    and would tempt the planner to scan where an index is what a large table needs.

    Without `ordered_index_scans`, only indexes the query's conditions can be looked up in are
    left (bitmap scans): the run table's day partitions, empty in a test, otherwise make walking
    every partition's time index, filtering each row, look cheapest."""
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        if not ordered_index_scans:
            cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())
