"""Organizations and API keys move here from the gateway app: state only, the tables stay.

The tables were created by gateway's migrations and keep their names (`db_table`), so this
migration changes Django's model state and nothing in the database — no data is copied. The
content types follow the models, so admin history and permissions still point at them.
"""

import django.db.models.deletion
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def move_content_types(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.using(schema_editor.connection.alias).filter(
        app_label="gateway", model__in=["organization", "apikey"]
    ).update(app_label="accounts")


def restore_content_types(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.using(schema_editor.connection.alias).filter(
        app_label="accounts", model__in=["organization", "apikey"]
    ).update(app_label="gateway")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("gateway", "0004_telemetry_cost_retention"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Organization",
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
                        ("name", models.CharField(max_length=200, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "retention",
                            models.CharField(
                                choices=[
                                    ("full", "Full (prompts, replies, replay)"),
                                    (
                                        "metadata",
                                        "Metadata only (no prompt or reply text; no replay)",
                                    ),
                                ],
                                default="full",
                                max_length=16,
                            ),
                        ),
                        ("retention_days", models.PositiveIntegerField(default=30)),
                        (
                            "optimize_default",
                            models.CharField(
                                choices=[("on", "On (lossless passes)"), ("off", "Off")],
                                default="on",
                                max_length=8,
                            ),
                        ),
                    ],
                    options={"db_table": "gateway_organization"},
                ),
                migrations.CreateModel(
                    name="ApiKey",
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
                        ("name", models.CharField(blank=True, default="", max_length=200)),
                        ("prefix", models.CharField(db_index=True, max_length=16)),
                        ("digest", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "organization",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="keys",
                                to="accounts.organization",
                            ),
                        ),
                    ],
                    options={"verbose_name": "API key", "db_table": "gateway_apikey"},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, restore_content_types),
    ]
