"""Runs and rollups point at the organizations and keys now owned by the accounts app.

State only: the foreign keys reference the same tables as before (accounts keeps their names).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("telemetry", "0005_chunk_run_no_extra_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="run",
                    name="organization",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="accounts.organization",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="api_key",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="runs",
                        to="accounts.apikey",
                    ),
                ),
                migrations.AlterField(
                    model_name="usagerollup",
                    name="organization",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="rollups",
                        to="accounts.organization",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
