"""Images of vision requests, stored once per organization by content hash, and the runs'
references to them."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("telemetry", "0006_accounts_models"),
    ]

    operations = [
        migrations.CreateModel(
            name="Image",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("sha256", models.CharField(max_length=64)),
                ("media_type", models.CharField(max_length=16)),
                ("width", models.PositiveIntegerField()),
                ("height", models.PositiveIntegerField()),
                ("size", models.PositiveIntegerField()),
                ("data", models.BinaryField()),
                ("first_seen_at", models.DateTimeField()),
                (
                    "organization",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="images",
                        to="accounts.organization",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("organization", "sha256"), name="image_org_sha256"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="RunImage",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("position", models.PositiveIntegerField()),
                ("param", models.CharField(blank=True, default="", max_length=64)),
                (
                    "image",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="uses",
                        to="telemetry.image",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="images",
                        to="telemetry.run",
                    ),
                ),
            ],
            options={
                "ordering": ["run", "position"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("run", "position"), name="run_image_position_unique"
                    )
                ],
            },
        ),
    ]
