"""The Postgres databases and Redis the Mortar targets use: create, read counters, clean up."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis


def admin_database_url() -> str:
    """The maintenance database the bench databases are created from."""
    parts = urlsplit(_base_database_url())
    return urlunsplit(parts._replace(path="/postgres"))


def database_url(name: str) -> str:
    parts = urlsplit(_base_database_url())
    return urlunsplit(parts._replace(path=f"/{name}"))


def _base_database_url() -> str:
    return (
        os.environ.get("BENCH_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or "postgres://postgres@127.0.0.1:5432/postgres"
    )


def redis_url() -> str:
    return (
        os.environ.get("BENCH_REDIS_URL")
        or os.environ.get("REDIS_URL")
        or "redis://127.0.0.1:6379/0"
    )


def recreate_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def pg_counters(url: str, name: str) -> dict[str, int]:
    """Postgres's cumulative counters for one database (pg_stat_database)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT sessions, xact_commit, tup_inserted, tup_updated"
            " FROM pg_stat_database WHERE datname = %s",
            (name,),
        ).fetchone()
    assert row is not None
    return dict(zip(("sessions", "xact_commit", "tup_inserted", "tup_updated"), row, strict=True))


def recorded_counts(url: str) -> dict[str, Any]:
    """How many runs (by status) and chunk rows a Mortar recorded in its database."""
    with psycopg.connect(url, autocommit=True) as conn:
        by_status: dict[str, int] = dict(
            conn.execute("SELECT status, count(*) FROM telemetry_run GROUP BY status").fetchall()
        )
        chunks = conn.execute("SELECT count(*) FROM telemetry_runchunk").fetchone()
    return {
        "runs": sum(by_status.values()),
        "by_status": by_status,
        "chunks": chunks[0] if chunks else 0,
    }


def redis_commands(url: str) -> dict[str, int]:
    """Redis's cumulative call count per command (INFO commandstats)."""
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def clean_redis(url: str, prefix: str) -> int:
    """Delete every key under `prefix`; return how many."""
    client = redis.Redis.from_url(url)
    removed = 0
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            removed += client.delete(*keys[start : start + 500])
    finally:
        client.close()
    return removed
