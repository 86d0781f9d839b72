"""A worker's slices of a budget, in the ledger's Postgres functions — now the billing app's.

This migration created `mortar_budget_draws` and `mortar_budget_release`. They belong to the
billing app now, which keeps them in its SQL files and creates them (billing migration 0002);
this step is kept, empty, so the migration history stays the same on every database.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0016_usage_slices"),
    ]

    operations = []
