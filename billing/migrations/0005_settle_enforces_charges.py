"""The settlement takes each run's charge as its close decided it, and refuses one outside its
hold, rather than working the charge out again from the run's cost."""

from django.db import migrations

from billing.ledger.sql import run_sql_file


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0004_settle_probe_recent_days"),
    ]

    operations = [
        run_sql_file(
            "0005_settle_enforces_charges.sql", reverse="0004_settle_probe_recent_days.sql"
        ),
    ]
