"""The ledger's SQL on Postgres — its functions and the run table's triggers — in the files
beside this module, loaded by the billing app's migrations.

How a change lands: a file, once a migration loads it, never changes. A change to a function
or a trigger is a new file, named after the migration that loads it and holding the whole new
definition (`CREATE OR REPLACE FUNCTION`; a `DROP` first where a signature changes), and a new
migration that loads it, with the file that restores the definition before it as its reverse.
So a fresh database replays history exactly as the databases migrated step by step did, each
migration's SQL as it was when it ran, and a migration can be reversed. The current definition
of a function is in the newest file that defines it (`grep -l mortar_budget_settle *.sql`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

SQL_DIR = Path(__file__).parent


def sql_file(name: str) -> str:
    return (SQL_DIR / name).read_text(encoding="utf-8")


def _runs(name: str) -> Callable[[StateApps, BaseDatabaseSchemaEditor], None]:
    def run(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        # Only on Postgres: on SQLite the ledger is Python (`billing.ledger.sqlite`).
        if schema_editor.connection.vendor == "postgresql":
            # No parameters: the file's % signs are RAISE's and format's, not placeholders.
            schema_editor.execute(sql_file(name), params=None)

    return run


def run_sql_file(name: str, *, reverse: str) -> migrations.RunPython:
    """A migration step that runs the SQL file `name` on Postgres, and `reverse` to undo it."""
    return migrations.RunPython(_runs(name), _runs(reverse))


def undone_by_sql_file(name: str) -> migrations.RunPython:
    """A migration step that does nothing, and runs the SQL file `name` when it is undone: the
    second file of a definition a later step restores in two."""
    return migrations.RunPython(migrations.RunPython.noop, _runs(name))
