"""When a worker holds from a slice and when from the ledger (`billing.services.slices`), against
the real ledger: the first hold of a budget comes from the ledger, which says how much room is
left; with room for 100 such holds, the next ones come from one slice reserved for them all;
near the end of a budget every hold comes from the ledger; a stopping worker gives back what
it did not draw; a slice is not drawn from past its budgets' period.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from decimal import Decimal

import pytest
from django.db import connection

from billing.models import BudgetHold, BudgetSpend
from billing.services.holds import HeldBudget, budget_slices
from billing.services.slices import SLICE_HOLDS
from tests.billing.test_hold_batches import (
    WHOLE_HOLD,
    hold_one,
    ledger_rows_removed,
    unsaved_key,
)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

__all__ = ["ledger_rows_removed"]  # the fixture, autouse here too


def run_ids(count: int) -> list[str]:
    tag = secrets.token_hex(6)
    return [f"batch-{tag}-{i}" for i in range(count)]


def test_holds_come_from_one_slice_once_the_ledger_says_there_is_room() -> None:
    key = unsaved_key(Decimal(100))  # room for some 26,000 holds of $0.003813
    first, *rest = run_ids(5)

    def held_now() -> Decimal:
        try:
            return BudgetSpend.objects.get(owner="key", owner_id=key.id).held_usd
        finally:
            connection.close()

    async def scenario() -> tuple[HeldBudget, list[HeldBudget], Decimal]:
        alone = await hold_one(key, first)
        together = await asyncio.gather(*(hold_one(key, run_id) for run_id in rest))
        reserved = await asyncio.to_thread(held_now)
        await budget_slices().release_all()  # the worker stops
        return alone, list(together), reserved

    alone, together, held_before_stopping = asyncio.run(scenario())

    assert alone.draw is None
    assert BudgetHold.objects.get(run_id=first).amount_usd == WHOLE_HOLD
    draws = [held.draw for held in together if held.draw is not None]
    assert len(draws) == 4
    assert len({draw.slice_id for draw in draws}) == 1  # one slice for all four
    assert [draw.amount_usd for draw in draws] == [WHOLE_HOLD] * 4
    assert not BudgetHold.objects.filter(run_id__in=rest).exists()  # no round trip each
    [reserved] = BudgetHold.objects.filter(run_id=draws[0].slice_id)
    # Reserved: SLICE_HOLDS whole holds (less than a 16th of the room); given back on
    # stopping: all but the four drawn, which the run writer would move to the runs' holds.
    assert held_before_stopping == WHOLE_HOLD + SLICE_HOLDS * WHOLE_HOLD
    assert reserved.amount_usd == 4 * WHOLE_HOLD
    spend = BudgetSpend.objects.get(owner="key", owner_id=key.id)
    assert spend.held_usd == WHOLE_HOLD + 4 * WHOLE_HOLD


def test_near_the_end_of_a_budget_every_hold_comes_from_the_ledger() -> None:
    key = unsaved_key(WHOLE_HOLD * 50)  # room for 50 holds: too few to slice
    ids = run_ids(6)

    async def scenario() -> list[HeldBudget]:
        return [await hold_one(key, run_id) for run_id in ids]

    held = asyncio.run(scenario())

    assert all(h.draw is None for h in held)
    assert BudgetHold.objects.filter(run_id__in=ids).count() == 6
    assert not BudgetHold.objects.filter(
        run_id__startswith="slice-", key_spend__owner_id=key.id
    ).exists()


def test_a_slice_is_not_drawn_from_past_the_end_of_its_budgets_period() -> None:
    """A draw is charged to the period its slice was reserved in: once that period is over, the
    slice goes back (what was not drawn) and the next hold takes a new one."""
    key = unsaved_key(Decimal(100))
    first, before_end, after_end = run_ids(3)

    async def scenario() -> tuple[HeldBudget, HeldBudget]:
        await hold_one(key, first)  # from the ledger, which says how much room there is
        before = await hold_one(key, before_end)
        slices = budget_slices()
        [current] = slices._slices.values()
        current.period_ends_at = time.time()  # the budget's period ends now
        after = await hold_one(key, after_end)
        await slices.release_all()
        return before, after

    before, after = asyncio.run(scenario())

    assert before.draw is not None and after.draw is not None
    assert before.draw.slice_id != after.draw.slice_id
    # Both slices went back but for their one draw each (which the run writer would move to
    # the runs' holds); nothing else is held.
    for draw in (before.draw, after.draw):
        assert BudgetHold.objects.get(run_id=draw.slice_id).amount_usd == WHOLE_HOLD
    spend = BudgetSpend.objects.get(owner="key", owner_id=key.id)
    assert spend.held_usd == 3 * WHOLE_HOLD
