"""The budget ledger's models now belong to the billing app: state only, the tables stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0019_run_store_lighter"),
        ("billing", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="BudgetHold"),
                migrations.DeleteModel(name="BudgetSpend"),
            ],
            database_operations=[],
        ),
    ]
