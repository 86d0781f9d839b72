"""What crosses into and out of the budget ledger: a hold asked for, a hold taken, a run's
settlement, a standing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from billing.budgets import Budget
from billing.costs import PER_MILLION, Prices
from telemetry.store.draws import BudgetDraw


@dataclass(frozen=True)
class HoldRequest:
    """One request's hold to take: what it may cost, on which budgets, until when."""

    run_id: str
    budgets: Sequence[Budget]  # the organization's before the key's
    prompt_tokens: int
    max_tokens: int
    prices: Prices
    expires_at: datetime

    @property
    def prompt_cost(self) -> Decimal:
        return self.prompt_tokens * self.prices.input / PER_MILLION

    @property
    def per_token(self) -> Decimal:
        return self.prices.output / PER_MILLION


class Settlement(NamedTuple):
    """One run's hold to settle: what its close charged it (the ledger takes that as decided,
    and refuses a charge outside the hold), and the draw it took from its worker's slice, which
    its row's insert may not have taken yet. (A tuple: one is made as each response ends, and a
    frozen dataclass's `__init__` costs three times as much.)"""

    run_id: str
    charged_usd: Decimal
    draw: BudgetDraw | None = None


@dataclass(frozen=True)
class Held:
    """What a hold took: the output cap it pays for, its amount, and the prompt's part; and
    what the tightest budget had left before it (where the worker's slices start from)."""

    max_tokens: int
    amount_usd: Decimal
    prompt_usd: Decimal
    remaining_usd: Decimal


@dataclass(frozen=True)
class Standing:
    """Where a budget stands in its current period."""

    budget_usd: Decimal
    period: str
    spent_usd: Decimal
    held_usd: Decimal
    remaining_usd: Decimal
    resets_at: datetime | None
