"""The run and chunk tables partitioned by day in Postgres; a chunk keyed by its run, its run's
acceptance time and its sequence, with no surrogate id.

Postgres: both tables become declarative range partitions, one a UTC day
(`telemetry_run_pYYYYMMDD`, `telemetry_runchunk_pYYYYMMDD`) plus a default partition each, by
the run's acceptance time (`accepted_at`; a chunk carries its run's as `run_accepted_at`).
Existing rows move: the tables are renamed aside, the partitioned ones created with a partition
for every day that has rows (and the days ahead), the rows copied over, the old tables dropped,
then the indexes, constraints and triggers recreated as they were. Keys hold the partition key,
as Postgres requires: the run's is (id, accepted_at), the chunk's (run_id, run_accepted_at, seq).
The chunk row also loses its bigint id and that id's index, and its columns are ordered so no
byte is padding. The run images' foreign key to their run is dropped (a partitioned table's key
is not `id` alone).

SQLite (the embedded default) keeps plain tables: only the chunk table is rebuilt with the new
key and column. Why: docs/decisions/run-store-partitions.md.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta

import django.db.models.deletion
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

import telemetry.models
from telemetry.store import partitions

logger = logging.getLogger(__name__)

RUN, CHUNK = partitions.RUN_TABLE, partitions.CHUNK_TABLE

# Aligned: the fixed-width columns first, widest first, so no byte of the row is padding.
CHUNK_TABLE = f"""
CREATE TABLE {CHUNK} (
    run_accepted_at timestamp with time zone NOT NULL,
    offset_us bigint NOT NULL,
    seq integer NOT NULL CONSTRAINT telemetry_runchunk_seq_check CHECK (seq >= 0),
    run_id varchar(40) NOT NULL,
    data bytea NOT NULL
) PARTITION BY RANGE (run_accepted_at)
"""

# The chunks' check that their runs are stored (migration 0019), now a probe of the one
# partition where each run is.
CHUNK_RUNS_CHECK = f"""
CREATE OR REPLACE FUNCTION mortar_chunks_have_runs()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    -- A lookup by key for each run, never a join: the planner cannot see how few rows the
    -- transition table holds, and would hash-join a scan of every run (the LIMIT keeps the
    -- subquery from being turned into one). With the run's acceptance time, Postgres probes
    -- the one partition the run is in.
    SELECT c.run_id INTO missing
    FROM (SELECT DISTINCT run_id, run_accepted_at FROM inserted_chunks) c
    WHERE (SELECT r.id FROM {RUN} r
           WHERE r.id = c.run_id AND r.accepted_at = c.run_accepted_at LIMIT 1) IS NULL
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE foreign_key_violation USING
            MESSAGE = format('a chunk''s run is not stored: %s', missing),
            TABLE = '{CHUNK}';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER mortar_chunks_have_runs
AFTER INSERT ON {CHUNK}
REFERENCING NEW TABLE AS inserted_chunks
FOR EACH STATEMENT EXECUTE FUNCTION mortar_chunks_have_runs();
"""


def _rows(schema_editor: BaseDatabaseSchemaEditor, sql: str, params: list[object]) -> list[tuple]:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _run_table_parts(schema_editor: BaseDatabaseSchemaEditor) -> dict[str, list[str]]:
    """The run table's indexes, constraints (less its key), triggers and statistics targets,
    as statements that recreate them."""
    indexes = _rows(
        schema_editor,
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " WHERE i.indrelid = to_regclass(%s) AND NOT i.indisprimary"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)",
        [RUN],
    )
    constraints = _rows(
        schema_editor,
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = to_regclass(%s) AND contype <> 'p' ORDER BY conname",
        [RUN],
    )
    triggers = _rows(
        schema_editor,
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
        " WHERE tgrelid = to_regclass(%s) AND NOT tgisinternal ORDER BY tgname",
        [RUN],
    )
    statistics = _rows(
        schema_editor,
        "SELECT attname, attstattarget FROM pg_attribute WHERE attrelid = to_regclass(%s)"
        " AND attnum > 0 AND NOT attisdropped AND attstattarget > 0",
        [RUN],
    )
    return {
        "indexes": [definition for (definition,) in indexes],
        "constraints": [
            f'ALTER TABLE {RUN} ADD CONSTRAINT "{name}" {definition}'
            for name, definition in constraints
        ],
        "triggers": [definition for (definition,) in triggers],
        "statistics": [
            f'ALTER TABLE {RUN} ALTER COLUMN "{name}" SET STATISTICS {target}'
            for name, target in statistics
        ],
    }


def _partition(schema_editor: BaseDatabaseSchemaEditor, table: str, day: date) -> None:
    name = partitions.partition_name(table, day)
    start = partitions.day_start(day)
    end = partitions.day_start(day + timedelta(days=1))
    schema_editor.execute(
        f"CREATE TABLE {name} PARTITION OF {table}"
        f" FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    )


def partition_postgres(schema_editor: BaseDatabaseSchemaEditor) -> None:
    parts = _run_table_parts(schema_editor)
    columns = ", ".join(
        f'"{name}"'
        for (name,) in _rows(
            schema_editor,
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s)"
            " AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
            [RUN],
        )
    )
    today = datetime.now(UTC).date()
    days = {
        day
        for (day,) in _rows(
            schema_editor,
            f"SELECT DISTINCT (accepted_at AT TIME ZONE 'UTC')::date FROM {RUN}",
            [],
        )
    }
    days.update(today + timedelta(days=n) for n in range(partitions.DAYS_AHEAD + 1))

    schema_editor.execute(f"ALTER TABLE {RUN} RENAME TO {RUN}_old")
    schema_editor.execute(f"ALTER TABLE {CHUNK} RENAME TO {CHUNK}_old")
    schema_editor.execute(
        f"CREATE TABLE {RUN} (LIKE {RUN}_old INCLUDING DEFAULTS INCLUDING GENERATED"
        " INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY RANGE (accepted_at)"
    )
    schema_editor.execute(CHUNK_TABLE)
    for table in (RUN, CHUNK):
        for day in sorted(days):
            _partition(schema_editor, table, day)
        schema_editor.execute(
            f"CREATE TABLE {partitions.default_partition_name(table)} PARTITION OF {table} DEFAULT"
        )

    schema_editor.execute(f"INSERT INTO {RUN} ({columns}) SELECT {columns} FROM {RUN}_old")
    # A chunk whose run is gone (possible before the check trigger) has no day to go to; it
    # was unreachable (every read goes through its run) and is not carried over.
    schema_editor.execute(
        f"INSERT INTO {CHUNK} (run_accepted_at, offset_us, seq, run_id, data)"
        f" SELECT r.accepted_at, c.offset_us, c.seq, c.run_id, c.data"
        f" FROM {CHUNK}_old c JOIN {RUN}_old r ON r.id = c.run_id"
    )
    schema_editor.execute(f"DROP TABLE {CHUNK}_old")
    schema_editor.execute(f"DROP TABLE {RUN}_old")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS mortar_chunks_have_runs()")

    # The old tables' names are free again: their indexes, constraints and triggers come back.
    schema_editor.execute(
        f"ALTER TABLE {RUN} ADD CONSTRAINT telemetry_run_pkey PRIMARY KEY (id, accepted_at)"
    )
    schema_editor.execute(
        f"ALTER TABLE {CHUNK} ADD CONSTRAINT telemetry_runchunk_pkey"
        " PRIMARY KEY (run_id, run_accepted_at, seq)"
    )
    for statement in parts["indexes"] + parts["constraints"] + parts["statistics"]:
        schema_editor.execute(statement)
    for statement in parts["triggers"]:
        schema_editor.execute(statement)
    schema_editor.execute(CHUNK_RUNS_CHECK, params=None)  # no placeholders: % is format's
    with schema_editor.connection.cursor() as cursor:
        for table in (RUN, CHUNK):
            partitions.name_partition_indexes(cursor, table)
    for table in (RUN, CHUNK):
        schema_editor.execute(f"ANALYZE {table}")


def rebuild_sqlite_chunks(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    schema_editor.execute(f"ALTER TABLE {CHUNK} RENAME TO {CHUNK}_old")
    schema_editor.create_model(apps.get_model("telemetry", "RunChunk"))
    schema_editor.execute(
        f"INSERT INTO {CHUNK} (run_id, run_accepted_at, seq, offset_us, data)"
        f" SELECT c.run_id, r.accepted_at, c.seq, c.offset_us, c.data"
        f" FROM {CHUNK}_old c JOIN {RUN} r ON r.id = c.run_id"
    )
    schema_editor.execute(f"DROP TABLE {CHUNK}_old")


def forward(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        partition_postgres(schema_editor)
    else:
        rebuild_sqlite_chunks(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0021_run_usage_source_upstream_count"),
        # Its triggers on the run table are recreated on the partitioned one.
        ("billing", "0003_settle_in_path"),
    ]

    operations = [
        migrations.AlterField(
            model_name="runimage",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="images",
                to="telemetry.run",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="runchunk", name="run_chunk_seq_unique"),
                migrations.RemoveField(model_name="runchunk", name="id"),
                migrations.AddField(
                    model_name="runchunk",
                    name="pk",
                    field=models.CompositePrimaryKey(
                        "run_id",
                        "run_accepted_at",
                        "seq",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                migrations.AddField(
                    model_name="runchunk",
                    name="run_accepted_at",
                    field=telemetry.models.RunAcceptedAtField(default=None),
                    preserve_default=False,
                ),
            ],
        ),
        migrations.RunPython(forward, elidable=False),
    ]
