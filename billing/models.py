"""The budget ledger's rows: each budget's spend per period, and the holds in flight.

The tables were created by the telemetry app and keep its names; the ledger's SQL functions
(`billing/ledger/sql/`) name them too.
"""

from __future__ import annotations

from django.db import models


class BudgetSpend(models.Model):
    """One budget's ledger for one period: what was charged and what is held right now.

    A budget belongs to an organization or a key (`owner`, `owner_id`); a row per period
    (`period_start`: the UTC day, the first of the month, or 1970-01-01 for `total`), created
    by the first hold of that period. Holds and charges change it only under a row lock
    (`billing.ledger`), so `spent_usd + held_usd` never passes the budget.
    """

    class Owner(models.TextChoices):
        ORGANIZATION = "organization"
        KEY = "key"

    owner = models.CharField(max_length=16, choices=Owner.choices)
    owner_id = models.BigIntegerField()
    period = models.CharField(max_length=8)
    period_start = models.DateField()
    spent_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    held_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)

    class Meta:
        db_table = "telemetry_budgetspend"
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "owner_id", "period", "period_start"], name="budget_spend_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.owner} {self.owner_id} {self.period} {self.period_start}"


class BudgetHold(models.Model):
    """A run's hold on its budgets until it is charged; deleted when it is settled.

    A worker killed mid-generation never settles its holds: past `expires_at` the
    reconciliation (`budget_holds_reconcile`) charges them from the run's stored usage.
    """

    run_id = models.CharField(max_length=40, primary_key=True)
    organization_spend = models.ForeignKey(
        BudgetSpend, on_delete=models.CASCADE, null=True, related_name="+"
    )
    key_spend = models.ForeignKey(
        BudgetSpend, on_delete=models.CASCADE, null=True, related_name="+"
    )
    amount_usd = models.DecimalField(max_digits=14, decimal_places=6)
    # What the prompt alone costs: charged for a run that left no usage behind.
    prompt_usd = models.DecimalField(max_digits=14, decimal_places=6)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "telemetry_budgethold"

    def __str__(self) -> str:
        return self.run_id
