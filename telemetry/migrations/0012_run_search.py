"""The dashboard's free-text search over runs: their prompt and reply text, and (Postgres) a GIN
index over its tsvector.

The index is partial, on finished runs only: a run's row is written when it opens (no reply
yet) and again when it closes, and only the second write computes the tsvector. The expression
must stay exactly what `dashboard.selectors.runs` filters on (`SEARCH_VECTOR_SQL`), or the
planner cannot use the index. The 'simple' configuration lower-cases words without stemming or
stop words: prompts come in every language, and an operator searches for the word they saw.
SQLite (the embedded default) has no index: the search there is a LIKE over both columns.
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

CREATE = """
CREATE INDEX IF NOT EXISTS run_search ON telemetry_run
USING gin (to_tsvector('simple'::regconfig, prompt_text || ' ' || reply_text))
WHERE status <> 'in_progress'
"""
DROP = "DROP INDEX IF EXISTS run_search"


def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0011_budget_holds_batch"),
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
