"""A batch of budget holds as one Postgres function — now the billing app's.

This migration created `mortar_budget_holds`. It belongs to the billing app now, which keeps it
in its SQL files and creates it (billing migration 0002); this step is kept, empty, so the
migration history stays the same on every database.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0010_worker_leases"),
    ]

    operations = []
