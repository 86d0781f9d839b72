"""Bounds on what operators set; budgets beyond their column's range brought within it."""

from decimal import Decimal

import django.core.validators
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

# As the migration was written (the models' bounds may change later).
BUDGET_USD_MAX = Decimal("99999999.999999")


def clamp_budgets(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Bring a budget stored beyond its column's range (SQLite kept it) within it, so the
    constraints below can be added and its row read: in SQL, as the ORM could not read the
    row to change it."""
    for table in ("gateway_organization", "gateway_apikey"):
        schema_editor.execute(
            f"UPDATE {table} SET budget_usd = %s WHERE budget_usd > %s",
            [str(BUDGET_USD_MAX), str(BUDGET_USD_MAX)],
        )
        schema_editor.execute(f"UPDATE {table} SET budget_usd = 0 WHERE budget_usd < 0")


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0004_key_changes"),
    ]

    operations = [
        migrations.RunPython(clamp_budgets, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="apikey",
            name="budget_usd",
            field=models.DecimalField(
                blank=True,
                decimal_places=6,
                max_digits=14,
                null=True,
                validators=[
                    django.core.validators.MinValueValidator(Decimal("0.000001")),
                    django.core.validators.MaxValueValidator(Decimal("99999999.999999")),
                ],
                verbose_name="budget (USD)",
            ),
        ),
        migrations.AlterField(
            model_name="apikey",
            name="requests_per_minute",
            field=models.PositiveIntegerField(
                blank=True,
                null=True,
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(2147483647),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="apikey",
            name="tokens_per_minute",
            field=models.PositiveIntegerField(
                blank=True,
                null=True,
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(2147483647),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="organization",
            name="budget_usd",
            field=models.DecimalField(
                blank=True,
                decimal_places=6,
                max_digits=14,
                null=True,
                validators=[
                    django.core.validators.MinValueValidator(Decimal("0.000001")),
                    django.core.validators.MaxValueValidator(Decimal("99999999.999999")),
                ],
                verbose_name="budget (USD)",
            ),
        ),
        migrations.AlterField(
            model_name="organization",
            name="requests_per_minute",
            field=models.PositiveIntegerField(
                blank=True,
                null=True,
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(2147483647),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="organization",
            name="retention_days",
            field=models.PositiveIntegerField(
                default=30,
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(36500),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="organization",
            name="tokens_per_minute",
            field=models.PositiveIntegerField(
                blank=True,
                null=True,
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(2147483647),
                ],
            ),
        ),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("budget_usd__isnull", True),
                    models.Q(
                        ("budget_usd__gte", 0),
                        ("budget_usd__lte", Decimal("99999999.999999")),
                    ),
                    _connector="OR",
                ),
                name="gateway_apikey_budget_usd_bounds",
            ),
        ),
        migrations.AddConstraint(
            model_name="organization",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("budget_usd__isnull", True),
                    models.Q(
                        ("budget_usd__gte", 0),
                        ("budget_usd__lte", Decimal("99999999.999999")),
                    ),
                    _connector="OR",
                ),
                name="gateway_organization_budget_usd_bounds",
            ),
        ),
    ]
