"""The columns that carry a run's budget draw to the ledger: the slice it drew from and the part
of its hold that paid for the prompt.

This migration also created the triggers on the run table that hand a stored run's draw and
charge to the budget ledger. They belong to the billing app now, which keeps them in its SQL
files and creates them (billing migration 0002).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0017_budget_slices"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="budget_slice",
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="held_prompt_usd",
            field=models.DecimalField(decimal_places=6, max_digits=14, null=True),
        ),
    ]
