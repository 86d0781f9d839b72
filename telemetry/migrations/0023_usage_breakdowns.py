"""Usage slices renamed usage breakdowns: "slice" is the billing app's word for a worker's part of
a budget. The model, its table, indexes and constraints take the new name; the rows stay.

Postgres renames in place: the table, its indexes and constraints, and what it named after the
table (the key, its sequence, the columns' checks). SQLite keeps a unique constraint's name in
its table's definition only, so there the table is remade under the new one.
"""

from __future__ import annotations

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

OLD, NEW = "telemetry_usageslice", "telemetry_usagebreakdown"
UNIQUE = ("usage_slice_unique", "usage_breakdown_unique")
# Besides the unique constraint, what Postgres named after the table: the key, the checks of the
# positive integer columns, and the key's identity sequence.
CONSTRAINTS = [
    UNIQUE,
    (f"{OLD}_pkey", f"{NEW}_pkey"),
    (f"{OLD}_requests_check", f"{NEW}_requests_check"),
    (f"{OLD}_errors_check", f"{NEW}_errors_check"),
]
SEQUENCE = (f"{OLD}_id_seq", f"{NEW}_id_seq")


def _renamed_in_postgres(schema_editor: BaseDatabaseSchemaEditor, *, back: bool) -> None:
    for old, new in (pair[::-1] if back else pair for pair in CONSTRAINTS):
        schema_editor.execute(f"ALTER TABLE {NEW} RENAME CONSTRAINT {old} TO {new}")
    old, new = SEQUENCE[::-1] if back else SEQUENCE
    schema_editor.execute(f"ALTER SEQUENCE {old} RENAME TO {new}")


def constraints_renamed(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        _renamed_in_postgres(schema_editor, back=False)


def constraints_renamed_back(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        _renamed_in_postgres(schema_editor, back=True)
    else:
        remade_on_sqlite(apps, schema_editor)


def remade_on_sqlite(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Remake the table as the model stands in `apps`, its unique constraint's name with it."""
    if schema_editor.connection.vendor == "sqlite":
        model = apps.get_model("telemetry", "UsageBreakdown")
        # On SQLite, adding a plain unique constraint remakes the table from the model (the
        # rows copied over), which names it already.
        schema_editor.add_constraint(model, model._meta.constraints[0])


UNIQUE_FIELDS = (
    "span",
    "grain",
    "start",
    "organization_id",
    "api_key_id",
    "end_user",
    "model",
    "deployment",
)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0022_run_store_partitions"),
    ]

    operations = [
        migrations.RenameModel(old_name="UsageSlice", new_name="UsageBreakdown"),
        migrations.RenameIndex(
            model_name="usagebreakdown",
            new_name="usage_breakdown_org_start",
            old_name="usage_slice_org_start",
        ),
        migrations.RenameIndex(
            model_name="usagebreakdown",
            new_name="usage_breakdown_end_user",
            old_name="usage_slice_end_user",
        ),
        # Postgres renames here; undone after the state below, SQLite's table is remade with
        # the old name.
        migrations.RunPython(constraints_renamed, constraints_renamed_back),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="usagebreakdown", name=UNIQUE[0]),
                migrations.AddConstraint(
                    model_name="usagebreakdown",
                    constraint=models.UniqueConstraint(fields=UNIQUE_FIELDS, name=UNIQUE[1]),
                ),
            ]
        ),
        # After the state above: SQLite's table is remade with the new name.
        migrations.RunPython(remade_on_sqlite, migrations.RunPython.noop),
    ]
