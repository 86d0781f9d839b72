"""One locked hold settled through the ORM, on either database: how the SQLite twin settles a
run, and how the reconciliation settles an expired hold on both."""

from __future__ import annotations

from decimal import Decimal

from django.db import IntegrityError

from billing.costs import to_micro
from billing.models import BudgetHold, BudgetSpend


def hold_settle(hold: BudgetHold, charged: Decimal) -> Decimal:
    """Charge one locked hold what was decided for its run, and release the rest; return the
    charge. A charge outside the hold is refused, as `mortar_budget_settle` refuses it."""
    if charged < 0 or charged > hold.amount_usd or charged != to_micro(charged):
        raise IntegrityError(f"mortar: a settlement charges {hold.run_id} outside its hold")
    spend_ids = [i for i in (hold.organization_spend_id, hold.key_spend_id) if i is not None]
    for row in BudgetSpend.objects.select_for_update().filter(id__in=spend_ids).order_by("id"):
        row.held_usd -= hold.amount_usd
        row.spent_usd += charged
        row.save(update_fields=["held_usd", "spent_usd"])
    hold.delete()
    return charged
