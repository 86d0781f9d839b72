"""What a run drew from its budgets, as the gateway records it with the run."""

from __future__ import annotations

from decimal import Decimal
from typing import NamedTuple


class BudgetDraw(NamedTuple):
    """What a run drew from its worker's slice of its budgets (`billing.services.slices`): part
    of the run's opened row (`budget_slice`, `held_usd`, `held_prompt_usd`), whose first insert
    turns it into the run's own hold, in Postgres (the billing app's triggers on the run table).

    Here, below billing, because the run writer reads it back from spooled rows of workers
    from before the draw was part of the run's fields."""

    run_id: str
    slice_id: str
    amount_usd: Decimal
    prompt_usd: Decimal
