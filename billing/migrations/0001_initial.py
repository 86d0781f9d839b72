"""The budget ledger's models move here from the telemetry app: state only, the tables stay.

The tables were created by telemetry's migrations and keep their names (`db_table`), so this
migration changes Django's model state and nothing in the database — no data is copied. The
content types follow the models, so admin history and permissions still point at them.
"""

import django.db.models.deletion
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

MODELS = ["budgetspend", "budgethold"]


def move_content_types(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.using(schema_editor.connection.alias).filter(
        app_label="telemetry", model__in=MODELS
    ).update(app_label="billing")


def restore_content_types(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.using(schema_editor.connection.alias).filter(
        app_label="billing", model__in=MODELS
    ).update(app_label="telemetry")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("telemetry", "0019_run_store_lighter"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="BudgetSpend",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "owner",
                            models.CharField(
                                choices=[("organization", "Organization"), ("key", "Key")],
                                max_length=16,
                            ),
                        ),
                        ("owner_id", models.BigIntegerField()),
                        ("period", models.CharField(max_length=8)),
                        ("period_start", models.DateField()),
                        (
                            "spent_usd",
                            models.DecimalField(decimal_places=6, default=0, max_digits=14),
                        ),
                        (
                            "held_usd",
                            models.DecimalField(decimal_places=6, default=0, max_digits=14),
                        ),
                    ],
                    options={
                        "db_table": "telemetry_budgetspend",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("owner", "owner_id", "period", "period_start"),
                                name="budget_spend_unique",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="BudgetHold",
                    fields=[
                        (
                            "run_id",
                            models.CharField(max_length=40, primary_key=True, serialize=False),
                        ),
                        ("amount_usd", models.DecimalField(decimal_places=6, max_digits=14)),
                        ("prompt_usd", models.DecimalField(decimal_places=6, max_digits=14)),
                        ("expires_at", models.DateTimeField(db_index=True)),
                        (
                            "key_spend",
                            models.ForeignKey(
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="billing.budgetspend",
                            ),
                        ),
                        (
                            "organization_spend",
                            models.ForeignKey(
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="billing.budgetspend",
                            ),
                        ),
                    ],
                    options={"db_table": "telemetry_budgethold"},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, restore_content_types),
    ]
