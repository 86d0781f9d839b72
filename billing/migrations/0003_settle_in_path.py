"""Holds settled by the runs' workers when their responses end: the ledger's settle takes a
draw the run's insert has not taken yet, and the run table's triggers no longer settle."""

from django.db import migrations

from billing.ledger.sql import run_sql_file, undone_by_sql_file


class Migration(migrations.Migration):
    dependencies = [("billing", "0002_ledger_functions")]

    # Undone (last step first) by the definitions before: 0002's functions, then its triggers.
    operations = [
        undone_by_sql_file("0002_run_triggers.sql"),
        run_sql_file("0003_settle_in_path.sql", reverse="0002_ledger_functions.sql"),
    ]
