"""The dashboard's free-text search over runs: their prompt and reply text, and (Postgres) their
tsvector, stored, with a GIN index over it.

`search` is a stored generated column, so Postgres computes it as it writes the row, whoever
writes it (the run writer's COPY and UPDATE, the ORM) and the model never sees it. It is NULL
while the run is in progress: a run's row is written when it opens (no reply yet) and again
when it closes, and only that second write tokenizes the text — once a run. Stored rather than
an index over an expression: a query that rechecks rows (a phrase) or filters them while walking
the time index reads the tsvector instead of tokenizing the text again, ~1 µs a word.

The 'simple' configuration lower-cases words without stemming or stop words: prompts come in
every language, and an operator searches for the word they saw. Adding a stored generated
column rewrites the run table once. SQLite (the embedded default) has neither column nor index:
the search there is a LIKE over the two text columns.
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

COLUMN = """
ALTER TABLE telemetry_run ADD COLUMN IF NOT EXISTS search tsvector GENERATED ALWAYS AS (
    CASE WHEN status <> 'in_progress'
    THEN to_tsvector('simple'::regconfig, prompt_text || ' ' || reply_text) END
) STORED
"""
# The runs list's other new filters, for the rare runs they look for: without these, a filter
# that matches no run reads every run (~1–3 s at 1,000,000; bench/runs_list_bench.py). The error
# and cost ones are partial, so the usual run (no error, under a cent) adds no entry to them.
INDEXES = {
    "run_search": "USING gin (search)",
    "run_errors": "(error_code, accepted_at DESC, id DESC) WHERE error_code <> ''",
    "run_costly": "(accepted_at DESC, id DESC) WHERE cost >= 0.01",
    # Not partial: a second is common (a stream often takes longer) and rare alike; the index
    # also gives the planner the statistics of latencies, so it knows when to use it.
    "run_latency": "((finished_at - accepted_at))",
}
CREATE = [
    f"CREATE INDEX IF NOT EXISTS {name} ON telemetry_run {how}" for name, how in INDEXES.items()
]
DROP = [f"DROP INDEX IF EXISTS {name}" for name in INDEXES]
# Ten times the default statistics for the tsvector: ANALYZE then keeps the 10,000 most common
# words, and estimates any other as rare, so the planner looks a rare word (or one no run has)
# up in the GIN index. With the default, a word outside the 1,000 most common was estimated at
# 0.1–0.5% of runs, and the planner walked the time index past every run looking for it: 1.3 s
# for a word in 20 of 1,000,000 runs, 1.7 s for one in none; 0.4 ms and 0.06 ms now (bench).
# ANALYZE of the run table reads more for it (~16 s at 1,000,000 runs, in autovacuum).
STATISTICS = "ALTER TABLE telemetry_run ALTER COLUMN search SET STATISTICS 1000"
DROP_COLUMN = "ALTER TABLE telemetry_run DROP COLUMN IF EXISTS search"


def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(COLUMN)
        schema_editor.execute(STATISTICS)
        for statement in CREATE:
            schema_editor.execute(statement)


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for statement in DROP:
            schema_editor.execute(statement)
        schema_editor.execute(DROP_COLUMN)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0014_run_key_accepted"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="prompt_text",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="run",
            name="reply_text",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.RunPython(create, drop),
    ]
