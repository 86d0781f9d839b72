"""The budget ledger's hold and settlement as Postgres functions — now the billing app's.

This migration created `mortar_budget_hold` and `mortar_budget_settle`. They belong to the
billing app now, which keeps them in its SQL files and creates them (billing migration 0002);
this step is kept, empty, so the migration history stays the same on every database.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0008_budget_ledger"),
    ]

    operations = []
