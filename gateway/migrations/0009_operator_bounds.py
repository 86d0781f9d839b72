"""Bounds on what operators set; prices beyond their column's range brought within it."""

from decimal import Decimal

import django.core.validators
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

# As the migration was written (the models' bounds may change later).
PRICE_MAX = Decimal("999999.999999")


def clamp_prices(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Bring a price stored beyond its column's range (SQLite kept it) within it, so the
    constraints below can be added and the catalog read: in SQL, as the ORM could not read
    the row to change it."""
    for price in ("price_input", "price_cached_input", "price_output"):
        schema_editor.execute(
            f"UPDATE gateway_model SET {price} = %s WHERE {price} > %s",
            [str(PRICE_MAX), str(PRICE_MAX)],
        )
        schema_editor.execute(f"UPDATE gateway_model SET {price} = 0 WHERE {price} < 0")


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0008_deployment_usage_count"),
    ]

    operations = [
        migrations.RunPython(clamp_prices, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="catalogmodel",
            name="context_window",
            field=models.PositiveIntegerField(
                default=4096,
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(2147483647),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="catalogmodel",
            name="price_cached_input",
            field=models.DecimalField(
                decimal_places=6,
                default=0,
                max_digits=12,
                validators=[
                    django.core.validators.MinValueValidator(Decimal("0")),
                    django.core.validators.MaxValueValidator(Decimal("999999.999999")),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="catalogmodel",
            name="price_input",
            field=models.DecimalField(
                decimal_places=6,
                default=0,
                max_digits=12,
                validators=[
                    django.core.validators.MinValueValidator(Decimal("0")),
                    django.core.validators.MaxValueValidator(Decimal("999999.999999")),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="catalogmodel",
            name="price_output",
            field=models.DecimalField(
                decimal_places=6,
                default=0,
                max_digits=12,
                validators=[
                    django.core.validators.MinValueValidator(Decimal("0")),
                    django.core.validators.MaxValueValidator(Decimal("999999.999999")),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="chunk_timeout_s",
            field=models.FloatField(
                default=60.0,
                validators=[
                    django.core.validators.MinValueValidator(0.001),
                    django.core.validators.MaxValueValidator(86400.0),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="connect_timeout_s",
            field=models.FloatField(
                default=5.0,
                validators=[
                    django.core.validators.MinValueValidator(0.001),
                    django.core.validators.MaxValueValidator(86400.0),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="first_byte_timeout_s",
            field=models.FloatField(
                default=60.0,
                validators=[
                    django.core.validators.MinValueValidator(0.001),
                    django.core.validators.MaxValueValidator(86400.0),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="scripted_delay_ms",
            field=models.PositiveIntegerField(
                default=0, validators=[django.core.validators.MaxValueValidator(60000)]
            ),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="total_timeout_s",
            field=models.FloatField(
                default=600.0,
                validators=[
                    django.core.validators.MinValueValidator(0.001),
                    django.core.validators.MaxValueValidator(86400.0),
                ],
            ),
        ),
        migrations.AddConstraint(
            model_name="catalogmodel",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("price_input__gte", 0), ("price_input__lte", Decimal("999999.999999"))
                ),
                name="gateway_model_price_input_bounds",
            ),
        ),
        migrations.AddConstraint(
            model_name="catalogmodel",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("price_cached_input__gte", 0),
                    ("price_cached_input__lte", Decimal("999999.999999")),
                ),
                name="gateway_model_price_cached_input_bounds",
            ),
        ),
        migrations.AddConstraint(
            model_name="catalogmodel",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("price_output__gte", 0), ("price_output__lte", Decimal("999999.999999"))
                ),
                name="gateway_model_price_output_bounds",
            ),
        ),
    ]
