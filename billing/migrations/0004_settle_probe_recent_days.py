"""The settlement's probe of the run table bounded to the days around now: the run table is
partitioned by day (telemetry migration 0022), and a probe by id alone reads every day's
partition."""

from django.db import migrations

from billing.ledger.sql import run_sql_file


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0003_settle_in_path"),
        ("telemetry", "0022_run_store_partitions"),
    ]

    operations = [
        run_sql_file("0004_settle_probe_recent_days.sql", reverse="0003_settle_in_path.sql"),
    ]
