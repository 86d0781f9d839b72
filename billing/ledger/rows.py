"""One locked hold settled through the ORM, on either database: how the SQLite twin settles a
run, and how the reconciliation settles an expired hold on both."""

from __future__ import annotations

from decimal import Decimal

from billing.costs import charge_for
from billing.models import BudgetHold, BudgetSpend


def hold_settle(hold: BudgetHold, cost: Decimal) -> Decimal:
    """Charge and release one locked hold; return the charge."""
    charged = charge_for(cost, hold.amount_usd)
    spend_ids = [i for i in (hold.organization_spend_id, hold.key_spend_id) if i is not None]
    for row in BudgetSpend.objects.select_for_update().filter(id__in=spend_ids).order_by("id"):
        row.held_usd -= hold.amount_usd
        row.spent_usd += charged
        row.save(update_fields=["held_usd", "spent_usd"])
    hold.delete()
    return charged
