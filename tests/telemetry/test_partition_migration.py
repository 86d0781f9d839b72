"""Migrating a populated run store into day partitions (telemetry 0022) loses no row.

A database of its own, migrated to the state before (by `manage.py migrate`, as an operator
does: some data migrations write through the default database only), filled through that
state's models with runs over several days, their chunks (bytes that are not UTF-8 too), images
and budget holds, then migrated on: every row is there, each chunk with the same bytes, in its
run's day.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.db import connections
from django.db.migrations.loader import MigrationLoader

from tests.support.servers import ROOT

pytestmark = pytest.mark.postgres

ALIAS = "partition_migration"
BEFORE = [("telemetry", "0021_run_usage_source_upstream_count"), ("billing", "0003_settle_in_path")]
AFTER = [("telemetry", "0022_run_store_partitions"), ("billing", "0004_settle_probe_recent_days")]
DAYS = [datetime(2026, 11, day, 10, 30, tzinfo=UTC) for day in (2, 3, 5)]


@pytest.fixture
def database(django_db_blocker: Any) -> Iterator[str]:
    """A database of its own (another test's migrations or rows cannot meet these)."""
    with django_db_blocker.unblock():
        default = connections["default"].settings_dict
        name = f"{default['NAME']}_partitions"
        server = {"host": default["HOST"], "port": default["PORT"] or 5432, "user": default["USER"]}
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}"')
        connections.settings[ALIAS] = {**default, "NAME": name}
        try:
            yield ALIAS
        finally:
            connections[ALIAS].close()
            del connections[ALIAS]
            del connections.settings[ALIAS]
            with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def _populate(apps: Any, using: str) -> dict[str, Any]:
    """Runs on three days, with chunks, an image and budget holds, in the state before."""
    Organization = apps.get_model("accounts", "Organization")
    Run = apps.get_model("telemetry", "Run")
    RunChunk = apps.get_model("telemetry", "RunChunk")
    Image = apps.get_model("telemetry", "Image")
    RunImage = apps.get_model("telemetry", "RunImage")
    BudgetHold = apps.get_model("billing", "BudgetHold")
    org = Organization.objects.using(using).create(name="migrated")
    runs, chunks = [], {}
    for n, accepted_at in enumerate(DAYS * 2):
        run = Run.objects.using(using).create(
            id=f"chatcmpl-{n:024x}",
            organization=org,
            status="completed" if n % 2 else "in_progress",
            accepted_at=accepted_at + timedelta(minutes=n),
            request_body=b'{"messages":[]}',
            prompt_text="hello",
            reply_text="world",
        )
        runs.append(run.id)
        for seq in range(4):
            data = b"data: " + bytes([n, seq, 0xFF, 0xFE]) + b"\n\n"
            RunChunk.objects.using(using).create(run=run, seq=seq, offset_us=seq * 7, data=data)
            chunks[(run.id, seq)] = data
    image = Image.objects.using(using).create(
        organization=org,
        sha256="cd" * 32,
        media_type="image/png",
        width=1,
        height=1,
        size=3,
        data=b"png",
        first_seen_at=DAYS[0],
    )
    RunImage.objects.using(using).create(run_id=runs[0], position=0, image=image, param="p")
    for run_id in runs[:2]:
        BudgetHold.objects.using(using).create(
            run_id=run_id, amount_usd=Decimal("0.5"), prompt_usd=Decimal("0.1"), expires_at=DAYS[2]
        )
    return {"runs": runs, "chunks": chunks}


def _migrate(database: str, *target: str) -> None:
    settings = connections[database].settings_dict
    url = f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT'] or 5432}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": f"{url}/{settings['NAME']}",
        "SECRET_KEY": "test-only-secret-key-not-for-production",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", *target],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )


def _rows(using: str, sql: str) -> list[tuple[Any, ...]]:
    with connections[using].cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


def test_a_populated_store_moves_into_day_partitions_without_losing_a_row(database: str) -> None:
    for app, migration in BEFORE:
        _migrate(database, app, migration)
    made = _populate(MigrationLoader(connections[database]).project_state(BEFORE).apps, database)

    _migrate(database)  # every migration, as an upgrade runs them
    applied = MigrationLoader(connections[database]).applied_migrations
    assert set(AFTER) <= set(applied)

    runs = _rows(
        database,
        "SELECT id, accepted_at, tableoid::regclass::text, status, prompt_text FROM telemetry_run",
    )
    assert sorted(r[0] for r in runs) == sorted(made["runs"])
    for run_id, accepted_at, partition, _, prompt in runs:
        assert partition == f"telemetry_run_p{accepted_at.astimezone(UTC):%Y%m%d}", run_id
        assert prompt == "hello"
    accepted = {run_id: accepted_at for run_id, accepted_at, *_ in runs}
    chunks = _rows(
        database,
        "SELECT run_id, seq, data, run_accepted_at, offset_us, tableoid::regclass::text"
        " FROM telemetry_runchunk",
    )
    assert {(r, s): bytes(d) for r, s, d, *_ in chunks} == made["chunks"]
    for run_id, seq, _, run_accepted_at, offset_us, partition in chunks:
        assert run_accepted_at == accepted[run_id]
        assert offset_us == seq * 7
        assert partition == f"telemetry_runchunk_p{run_accepted_at.astimezone(UTC):%Y%m%d}"
    assert _rows(database, "SELECT run_id, position, param FROM telemetry_runimage") == [
        (made["runs"][0], 0, "p")
    ]
    assert sorted(_rows(database, "SELECT run_id FROM telemetry_budgethold")) == sorted(
        (run_id,) for run_id in made["runs"][:2]
    )
    assert _rows(database, "SELECT count(*) FROM telemetry_run_default") == [(0,)]
    # The search column is computed again for every run, and the triggers came back.
    assert _rows(database, "SELECT count(*) FROM telemetry_run WHERE search IS NOT NULL") == [(3,)]
    triggers = _rows(
        database,
        "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
        " AND tgrelid IN ('telemetry_run'::regclass, 'telemetry_runchunk'::regclass)",
    )
    assert sorted(triggers) == [("mortar_chunks_have_runs",), ("mortar_run_budget_inserted",)]
    keys = _rows(
        database,
        "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE contype = 'p' AND conrelid IN"
        " ('telemetry_run'::regclass, 'telemetry_runchunk'::regclass) ORDER BY 1",
    )
    assert keys == [("telemetry_run", "PRIMARY KEY (id, accepted_at)")]
    assert _rows(
        database, "SELECT indexdef FROM pg_indexes WHERE tablename = 'telemetry_runchunk'"
    ) == [
        (
            "CREATE INDEX run_chunk_run ON ONLY public.telemetry_runchunk"
            " USING btree (run_id, run_accepted_at)",
        )
    ]
    # Every day's run partition, the ones the migration made included, keeps the search
    # vector's statistics target (a partition does not take its table's).
    targets = _rows(
        database,
        "SELECT c.relname, a.attstattarget FROM pg_inherits i"
        " JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_attribute a ON a.attrelid = i.inhrelid AND a.attname = 'search'"
        " WHERE i.inhparent = 'telemetry_run'::regclass",
    )
    assert targets and {target for _, target in targets} == {1000}, targets
