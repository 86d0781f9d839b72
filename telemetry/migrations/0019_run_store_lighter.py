"""Less work for Postgres on each stored run and chunk, the same rows stored.

Measured with `bench/writer_bench.py`, the CPU of Postgres's backend per run (docs/operating/run-store.md). Dropped:

- the chunk table's foreign key to its run: deferred to the commit, its check looked every
  chunk's run up and locked the run's row, a third of what storing a 20-chunk stream cost
  Postgres. A statement-level trigger takes its place: after each INSERT (or COPY) of chunks,
  it looks up each run the statement's chunks name, without locking it, and refuses the
  statement, as the foreign key did, if one is not stored; the run writer then writes the batch
  run by run and drops that run's rows. What it does not do: stop a run being deleted under
  its chunks. The ORM deletes a run's chunks with it (Django carries `on_delete` out itself),
  and only a chunk written while its run is being deleted can outlive it.
- the run's own index on `organization_id`: every index that leads with it serves the same
  lookups (`run_org_accepted`, `run_org_session`, `run_org_model_accepted`).
- the `varchar_pattern_ops` twins Postgres gets for an indexed `CharField` (`status`, and the
  primary key `id`): they serve only `LIKE 'prefix%'`, which no query of Mortar's asks.
- the index of every run's status, for `run_not_completed`: partial, so a run stored whole or
  closed adds nothing to it, and ordered by time, so the runs list's rarer statuses page by it.
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

CHUNK_RUNS_CHECK = """
CREATE OR REPLACE FUNCTION mortar_chunks_have_runs()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    -- A lookup by primary key for each run, never a join: the planner cannot see how few
    -- rows the transition table holds, and would hash-join a scan of every run (the LIMIT
    -- keeps the subquery from being turned into one).
    SELECT c.run_id INTO missing
    FROM (SELECT DISTINCT run_id FROM inserted_chunks) c
    WHERE (SELECT r.id FROM telemetry_run r WHERE r.id = c.run_id LIMIT 1) IS NULL
    LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE foreign_key_violation USING
            MESSAGE = format('a chunk''s run is not stored: %s', missing),
            TABLE = 'telemetry_runchunk';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER mortar_chunks_have_runs
AFTER INSERT ON telemetry_runchunk
REFERENCING NEW TABLE AS inserted_chunks
FOR EACH STATEMENT EXECUTE FUNCTION mortar_chunks_have_runs();
"""
DROP_CHUNK_RUNS_CHECK = """
DROP TRIGGER IF EXISTS mortar_chunks_have_runs ON telemetry_runchunk;
DROP FUNCTION IF EXISTS mortar_chunks_have_runs();
"""

# Found by its definition, not its name: Django names it from a hash of the table and column.
ID_PATTERN_INDEX = """
SELECT indexname FROM pg_indexes
WHERE schemaname = current_schema() AND tablename = 'telemetry_run'
  AND indexdef LIKE '%(id varchar_pattern_ops)'
"""


def create_chunk_runs_check(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CHUNK_RUNS_CHECK, params=None)  # no placeholders: % is format's


def drop_chunk_runs_check(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_CHUNK_RUNS_CHECK, params=None)


def drop_id_pattern_index(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(ID_PATTERN_INDEX)
        names = [name for (name,) in cursor.fetchall()]
    for name in names:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


def create_id_pattern_index(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    run = apps.get_model("telemetry", "Run")
    statement = schema_editor._create_like_index_sql(run, run._meta.get_field("id"))  # type: ignore[attr-defined]
    if statement is not None:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0004_key_changes"),
        ("telemetry", "0018_run_budget_draw_triggers"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "completed"), _negated=True),
                fields=["status", "-accepted_at", "-id"],
                name="run_not_completed",
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="organization",
            field=models.ForeignKey(
                db_index=False,
                on_delete=models.CASCADE,
                related_name="runs",
                to="accounts.organization",
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("in_progress", "In Progress"),
                    ("completed", "Completed"),
                    ("refused", "Refused"),
                    ("failed", "Failed"),
                    ("stopped", "Stopped"),
                    ("cancelled", "Cancelled"),
                    ("interrupted", "Interrupted"),
                ],
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="runchunk",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=models.CASCADE,
                related_name="chunks",
                to="telemetry.run",
            ),
        ),
        migrations.RunPython(create_chunk_runs_check, drop_chunk_runs_check, elidable=False),
        migrations.RunPython(drop_id_pattern_index, create_id_pattern_index, elidable=False),
    ]
