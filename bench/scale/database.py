"""The scale benchmark's database: made fresh (or kept), Django set up on it, and what it holds —
its layout (partitioned or not), its tables' sizes, and the disk around it."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import dj_database_url
import psycopg
from psycopg import sql

NAME = "mortar_bench_scale"
RUN_TABLE = "telemetry_run"
CHUNK_TABLE = "telemetry_runchunk"


def server_url(database: str) -> str:
    """The URL of `database` on DATABASE_URL's server (the local Postgres by default)."""
    base = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    return base.rsplit("/", 1)[0] + f"/{database}"


def _admin() -> psycopg.Connection:
    config = dj_database_url.parse(server_url("postgres"))
    return psycopg.connect(
        host=config["HOST"],
        port=config["PORT"] or 5432,
        user=config["USER"],
        password=config["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    )


def exists(name: str = NAME) -> bool:
    with _admin() as admin:
        return bool(
            admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        )


def create_fresh(name: str = NAME) -> None:
    """Drop the database if it is there, and create it empty."""
    with _admin() as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop(name: str = NAME) -> None:
    with _admin() as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def setup_django(name: str = NAME) -> str:
    """Django on the bench database, migrated; returns its URL."""
    url = server_url(name)
    os.environ["DATABASE_URL"] = url
    os.environ.pop("REDIS_URL", None)  # the pages need none; keep the bench self-contained
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("SECRET_KEY", "scale-bench-only")
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    # A store this size is served with beat refreshing the rollups (timed on its own), never
    # by the pages in-process, the embedded default's way.
    os.environ["MORTAR_ROLLUPS_IN_PROCESS"] = "false"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


def connect(name: str = NAME) -> psycopg.Connection:
    """A connection of its own (autocommit), beside Django's."""
    config = dj_database_url.parse(server_url(name))
    return psycopg.connect(
        host=config["HOST"],
        port=config["PORT"] or 5432,
        user=config["USER"],
        password=config["PASSWORD"] or None,
        dbname=name,
        autocommit=True,
    )


@dataclass(frozen=True)
class Layout:
    """How the run store is laid out in this database."""

    partitioned: bool  # the run and chunk tables are partitioned by day
    chunk_run_accepted_at: bool  # chunks carry their run's acceptance time


def layout(conn: psycopg.Connection) -> Layout:
    kind = conn.execute("SELECT relkind FROM pg_class WHERE relname = %s", [RUN_TABLE]).fetchone()
    column = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_name = %s"
        " AND column_name = 'run_accepted_at'",
        [CHUNK_TABLE],
    ).fetchone()
    return Layout(partitioned=bool(kind and kind[0] == "p"), chunk_run_accepted_at=bool(column))


@dataclass(frozen=True)
class TableBytes:
    """A table's bytes — its heap (with TOAST), its indexes — and its rows."""

    table: str
    heap: int
    indexes: int
    rows: int

    @property
    def total(self) -> int:
        return self.heap + self.indexes


def table_bytes(conn: psycopg.Connection, table: str) -> TableBytes:
    """The table's bytes, its partitions' summed when it is partitioned; its rows as the last
    VACUUM, ANALYZE or index build counted them (a count(*) of 10^8 chunks reads them all)."""
    parts = [
        row[0]
        for row in conn.execute(
            "SELECT relid::text FROM pg_partition_tree(%s::regclass) WHERE isleaf", [table]
        ).fetchall()
    ] or [table]
    heap = indexes = rows = 0
    for part in parts:
        got = conn.execute(
            "SELECT pg_table_size(%s::regclass), pg_indexes_size(%s::regclass),"
            " greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s::regclass",
            [part, part, part],
        ).fetchone()
        assert got is not None
        heap += got[0]
        indexes += got[1]
        rows += got[2]
    return TableBytes(table, heap, indexes, rows)


def disk_free_bytes(path: str = "/") -> int:
    return shutil.disk_usage(path).free


def database_bytes(conn: psycopg.Connection) -> int:
    got = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(got[0]) if got else 0
