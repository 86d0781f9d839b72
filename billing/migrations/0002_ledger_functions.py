"""The ledger's SQL functions and the run table's triggers, now the billing app's.

They were created by telemetry's migrations 0009, 0011, 0017 and 0018, which no longer do:
here they are loaded from the billing app's SQL files (`billing/ledger/sql/`). A database
migrated before has them already, with these definitions: the functions are replaced by the
same, the triggers dropped and created again, in this migration's transaction.
"""

from django.db import migrations

from billing.ledger.sql import run_sql_file


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0001_initial"),
        # The run table with the columns the triggers read (`budget_slice`, `held_prompt_usd`).
        ("telemetry", "0018_run_budget_draw_triggers"),
    ]

    operations = [
        run_sql_file("0002_ledger_functions.sql", reverse="0002_ledger_functions_revert.sql"),
        run_sql_file("0002_run_triggers.sql", reverse="0002_run_triggers_revert.sql"),
    ]
