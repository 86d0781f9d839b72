"""What a run cost — its usage at the model's prices — and what it is charged for it.

Prices are per million input, cached-input and output tokens; the catalog keeps them on each
model (`gateway.models.CatalogModel.prices`). Amounts are Decimal USD; what a budget holds and
charges is rounded up to the micro-dollar.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

PER_MILLION = Decimal(1_000_000)
MICRO = Decimal("0.000001")


@dataclass(frozen=True)
class Prices:
    """Currency units per million input, cached-input and output tokens."""

    input: Decimal = Decimal(0)
    cached_input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)


def cached_tokens_of(usage: dict[str, Any]) -> int:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) and cached > 0 else 0


def usage_cost(usage: dict[str, Any], prices: Prices) -> Decimal:
    """Cached prompt tokens at the cached price, the rest of the prompt at the input price."""
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = min(cached_tokens_of(usage), prompt)
    total = (
        (prompt - cached) * prices.input + cached * prices.cached_input + completion * prices.output
    )
    return total / PER_MILLION


def to_micro(amount: Decimal) -> Decimal:
    """Round up to the micro-dollar."""
    return amount.quantize(MICRO, rounding=ROUND_CEILING)


def charge_for(cost: Decimal, held: Decimal) -> Decimal:
    """What a run is charged: its cost to the micro-dollar, never more than it held."""
    return min(to_micro(cost), held)
