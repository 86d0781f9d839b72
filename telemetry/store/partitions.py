"""The run store's day partitions in Postgres: the run and chunk tables are partitioned by range
of their run's acceptance time, one partition a UTC day each, plus a default partition each.

- `telemetry_run_pYYYYMMDD` holds the runs accepted that day (`accepted_at`), and
  `telemetry_runchunk_pYYYYMMDD` their chunks (`run_accepted_at`, the run's `accepted_at`), so a
  run's chunks stay with their run and a day goes whole.
- `telemetry_run_default` and `telemetry_runchunk_default` catch a row of a day with no partition
  yet: a guard, meant to stay empty (`/readyz` warns when they are not). A partition created
  later for such a day takes its rows out of the default partition.
- Partitions are created ahead (`ensure_partitions`): by `migrate`, and by the scheduled task
  every hour (`telemetry.tasks.ensure_run_partitions`), seven days ahead.
- Retention drops whole days (`drop_partitions_before`): detach, then drop, which frees the
  disk at once and leaves nothing for autovacuum, where deleting a day's rows would.

Why a day, and the keys: docs/decisions/run-store-partitions.md. SQLite, the embedded default,
keeps plain tables: every function here does nothing there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import psycopg
from django.db import OperationalError, connection, transaction

logger = logging.getLogger(__name__)

RUN_TABLE = "telemetry_run"
CHUNK_TABLE = "telemetry_runchunk"
# Each partitioned table and its partition key. The chunks first: dropped before their runs.
TABLES = ((CHUNK_TABLE, "run_accepted_at"), (RUN_TABLE, "accepted_at"))
# How far ahead the scheduled task keeps partitions.
DAYS_AHEAD = 7
# Waited for at most, for the lock a partition's detach or drop takes on its table: past it the
# drop is left for the next purge, rather than queueing the writer's COPYs behind it.
DROP_LOCK_TIMEOUT = "2s"
# Serialises the functions below across processes (two workers starting at once).
_LOCK_KEY = 0x6D6F72746172  # "mortar"
_DAY_NAME = re.compile(r"_p(\d{8})$")


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def default_partition_name(table: str) -> str:
    return f"{table}_default"


def day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def is_partitioned() -> bool:
    """Whether the run table is partitioned: Postgres, migrated (telemetry 0022)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(%s)",
            [RUN_TABLE],
        )
        row = cursor.fetchone()
    return row is not None and row[0] == "p"


def partition_days(table: str = RUN_TABLE) -> list[date]:
    """The days that have a partition of `table`, oldest first."""
    if not is_partitioned():
        return []
    with connection.cursor() as cursor:
        return _partition_days(cursor, table)


def ensure_partitions(first_day: date, last_day: date) -> list[str]:
    """Create the missing day partitions of both tables from `first_day` to `last_day`
    (inclusive); return the names created. Idempotent; nothing on SQLite.

    A day whose rows sit in the default partition (no partition was there when they came) gets
    them moved into its new partition, in the same transaction.
    """
    if not is_partitioned() or last_day < first_day:
        return []
    created: list[str] = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        for table, key in TABLES:
            existing = set(_partition_days(cursor, table))
            for day in _days(first_day, last_day):
                if day not in existing:
                    _create_partition(cursor, table, key, day)
                    created.append(partition_name(table, day))
            if created:
                name_partition_indexes(cursor, table)
    if created:
        logger.info("run store: created partitions %s", ", ".join(created))
    return created


def ensure_partitions_ahead(
    *, today: date | None = None, days_ahead: int = DAYS_AHEAD
) -> list[str]:
    """Partitions from today to `days_ahead` days on (the scheduled task's and migrate's)."""
    today = today or datetime.now(UTC).date()
    return ensure_partitions(today, today + timedelta(days=days_ahead))


def drop_partitions_before(day: date) -> list[str]:
    """Detach and drop the day partitions of both tables for the days before `day`, oldest first;
    return the names dropped. Nothing on SQLite.

    Stops at the first day that still has a run in progress (it may still be streaming), or
    whose lock is not granted within `DROP_LOCK_TIMEOUT` (busy: left for the next purge). Each
    day goes in a transaction of its own: its images' links, then its chunks, then its runs.
    Detaching CONCURRENTLY is not possible on a table with a default partition, so the detach
    takes the table's lock for a moment; the lock timeout bounds the wait for it.
    """
    if not is_partitioned():
        return []
    dropped: list[str] = []
    for old_day in partition_days(RUN_TABLE):
        if old_day >= day:
            break
        names = _drop_day(old_day)
        if names is None:
            break
        dropped.extend(names)
    # A chunk partition of a day with no run partition (none can hold rows: a chunk's run is
    # in its day).
    run_days = set(partition_days(RUN_TABLE))
    for old_day in partition_days(CHUNK_TABLE):
        if old_day >= day or old_day in run_days:
            continue
        names = _drop_day(old_day)
        if names:
            dropped.extend(names)
    if dropped:
        logger.info("run store: dropped partitions %s", ", ".join(dropped))
    return dropped


def default_partition_rows(limit: int | None = None) -> int:
    """How many rows the default partitions hold (both tables), counted up to `limit` each when
    given; 0 on SQLite. Rows there mean partitions were not created ahead of their day."""
    if not is_partitioned():
        return 0
    total = 0
    with connection.cursor() as cursor:
        for table, _ in TABLES:
            name = default_partition_name(table)
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
            if not cursor.fetchone()[0]:
                continue
            if limit is None:
                cursor.execute(f'SELECT count(*) FROM "{name}"')
            else:
                cursor.execute(
                    f'SELECT count(*) FROM (SELECT 1 FROM "{name}" LIMIT %s) AS r', [limit]
                )
            total += int(cursor.fetchone()[0])
    return total


def name_partition_indexes(cursor: Any, table: str) -> None:
    """Name each partition's copy of an index of `table` after it (`run_key_accepted_p20261207`),
    where Postgres names it after its columns: a query plan then says which index it used."""
    cursor.execute(
        "SELECT child.relname, parent.relname, part.relname"
        " FROM pg_inherits i"
        " JOIN pg_class child ON child.oid = i.inhrelid"
        " JOIN pg_class parent ON parent.oid = i.inhparent"
        " JOIN pg_index x ON x.indexrelid = child.oid"
        " JOIN pg_class part ON part.oid = x.indrelid"
        " JOIN pg_index px ON px.indexrelid = parent.oid"
        " WHERE px.indrelid = to_regclass(%s)",
        [table],
    )
    for child, parent, partition in cursor.fetchall():
        wanted = f"{parent}_{partition.removeprefix(table + '_')}"[:63]
        if child != wanted:
            cursor.execute(f'ALTER INDEX "{child}" RENAME TO "{wanted}"')


def _days(first_day: date, last_day: date) -> Iterator[date]:
    day = first_day
    while day <= last_day:
        yield day
        day += timedelta(days=1)


def _partition_days(cursor: Any, table: str) -> list[date]:
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = to_regclass(%s)",
        [table],
    )
    days = []
    for (name,) in cursor.fetchall():
        match = _DAY_NAME.search(name)
        if match and name == f"{table}_p{match.group(1)}":
            days.append(datetime.strptime(match.group(1), "%Y%m%d").date())
    return sorted(days)


def _bounds(day: date) -> str:
    start, end = day_start(day), day_start(day + timedelta(days=1))
    return f"FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"


def _create_partition(cursor: Any, table: str, key: str, day: date) -> None:
    name, default = partition_name(table, day), default_partition_name(table)
    start, end = day_start(day), day_start(day + timedelta(days=1))
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [default])
    has_default = cursor.fetchone()[0]
    strays = False
    if has_default:
        cursor.execute(
            f'SELECT EXISTS (SELECT 1 FROM "{default}" WHERE "{key}" >= %s AND "{key}" < %s)',
            [start, end],
        )
        strays = cursor.fetchone()[0]
    if not strays:
        cursor.execute(f'CREATE TABLE "{name}" PARTITION OF "{table}" FOR VALUES {_bounds(day)}')
        _statistics_targets(cursor, table, name)
        return
    # The default partition holds rows of this day: they move into the new partition, which is
    # then attached (Postgres refuses to create a partition whose rows the default one holds).
    columns = ", ".join(f'"{c}"' for c in _stored_columns(cursor, table))
    cursor.execute(
        f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING DEFAULTS INCLUDING GENERATED'
        " INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)"
    )
    cursor.execute(
        f'WITH moved AS (DELETE FROM "{default}" WHERE "{key}" >= %s AND "{key}" < %s'
        f' RETURNING {columns}) INSERT INTO "{name}" ({columns}) SELECT {columns} FROM moved',
        [start, end],
    )
    logger.warning(
        "run store: moved %d rows of %s from %s into its new partition %s",
        cursor.rowcount,
        day,
        default,
        name,
    )
    cursor.execute(f'ALTER TABLE "{table}" ATTACH PARTITION "{name}" FOR VALUES {_bounds(day)}')
    _statistics_targets(cursor, table, name)


def _statistics_targets(cursor: Any, table: str, partition: str) -> None:
    """The table's columns' statistics targets on a new partition, which does not take them
    (the run's search vector keeps 10,000 common words: telemetry migration 0015)."""
    cursor.execute(
        "SELECT attname, attstattarget FROM pg_attribute WHERE attrelid = to_regclass(%s)"
        " AND attnum > 0 AND NOT attisdropped AND attstattarget > 0",
        [table],
    )
    for column, target in cursor.fetchall():
        cursor.execute(
            f'ALTER TABLE "{partition}" ALTER COLUMN "{column}" SET STATISTICS {int(target)}'
        )


def _stored_columns(cursor: Any, table: str) -> list[str]:
    """The table's columns less the generated ones (which an INSERT may not name)."""
    cursor.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s)"
        " AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
        [table],
    )
    return [name for (name,) in cursor.fetchall()]


def _drop_day(day: date) -> list[str] | None:
    """Drop one day's partitions; None when the day must wait (a run in progress, a busy lock)."""
    run_partition = partition_name(RUN_TABLE, day)
    dropped: list[str] = []
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
            cursor.execute(f"SET LOCAL lock_timeout = '{DROP_LOCK_TIMEOUT}'")
            # A table with checks still deferred in this transaction cannot be dropped: run them
            # now (none are pending in the purge's own transaction; a caller's may hold some).
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            # Both tables' locks first, in the order the run writer takes them (its batch
            # COPYs runs, then chunks): detaching the chunks' partition first while a batch
            # held the run table and waited for the chunk table was a deadlock (the scale
            # benchmark's writer, bench/scale/). The detaches take these locks anyway.
            for table in (RUN_TABLE, CHUNK_TABLE):
                cursor.execute(f'LOCK TABLE ONLY "{table}" IN ACCESS EXCLUSIVE MODE')
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [run_partition])
            has_runs = cursor.fetchone()[0]
            if has_runs:
                cursor.execute(
                    f'SELECT EXISTS (SELECT 1 FROM "{run_partition}" WHERE status = %s)',
                    ["in_progress"],
                )
                if cursor.fetchone()[0]:
                    logger.info("run store: %s keeps a run in progress; not dropped", day)
                    return None
                # The runs' images' links: no foreign key carries them away with their runs.
                cursor.execute(
                    "DELETE FROM telemetry_runimage"
                    f' WHERE run_id IN (SELECT id FROM "{run_partition}")'
                )
            for table, _ in TABLES:
                name = partition_name(table, day)
                cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
                if not cursor.fetchone()[0]:
                    continue
                cursor.execute(f'ALTER TABLE "{table}" DETACH PARTITION "{name}"')
                cursor.execute(f'DROP TABLE "{name}"')
                dropped.append(name)
    except OperationalError as exc:
        if not isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
            raise
        logger.warning("run store: %s not dropped, its tables are busy: %s", day, exc)
        return None
    return dropped
