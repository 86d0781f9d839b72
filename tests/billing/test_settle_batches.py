"""When a response ends, its hold is settled on the ledger: awaited for a hold taken from the
ledger itself, in the background for a draw from the worker's slice.

A hold from the ledger (a budget near its end) must be settled before the response's last byte:
the client's next request, on any worker, must find the hold's unused part back in the budget.
A draw from a slice changes no answer while it waits — the whole slice is held on the ledger —
so it is settled with the others of the next `DEFERRED_SECONDS` (or once `DEFERRED_BATCH` wait),
one round trip a batch. In-process, on the real ledger (Postgres: only Postgres has slices); the
checks read the ledger from another thread while the event loop is blocked, so no timer of the
loop can fire in between.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import TypeVar

import pytest
from django.db import connection

from accounts.models import ApiKey
from billing.models import BudgetHold, BudgetSpend
from billing.services import holds
from billing.services.holds import (
    LEDGER_THREADS,
    HeldBudget,
    release_budget_slices,
    settlements_drained,
)
from tests.billing.test_hold_batches import (
    OWNER_IDS_FROM,
    hold_one,
    transactions_of,
    unsaved_key,
)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

T = TypeVar("T")
COST = Decimal("0.001234")  # what each run is charged: less than its hold (WHOLE_HOLD)
READER = ThreadPoolExecutor(1, thread_name_prefix="test-ledger-reader")


def read_now(read: Callable[[], T]) -> T:
    """Read the ledger on another connection, blocking the event loop meanwhile."""

    def run() -> T:
        try:
            return read()
        finally:
            connection.close()

    return READER.submit(run).result()


def spent(key: ApiKey) -> Decimal:
    spend = BudgetSpend.objects.filter(owner="key", owner_id=key.id).first()
    return Decimal(0) if spend is None else spend.spent_usd


@pytest.fixture(autouse=True)
def ledger_rows_removed() -> Iterator[None]:
    yield

    def remove() -> None:
        BudgetHold.objects.filter(run_id__startswith="batch-").delete()
        BudgetHold.objects.filter(key_spend__owner_id__gte=OWNER_IDS_FROM).delete()
        BudgetSpend.objects.filter(owner_id__gte=OWNER_IDS_FROM).delete()
        connection.close()

    LEDGER_THREADS.submit(remove).result()


async def held_in_order(key: ApiKey, count: int) -> list[HeldBudget]:
    """`count` holds one after another: the first from the ledger (which says how much room
    the budget has), the others drawn from the slice it then reserves."""
    return [await hold_one(key, f"batch-{secrets.token_hex(6)}-{i}") for i in range(count)]


def test_a_slice_s_draws_are_settled_after_their_responses_in_one_batch() -> None:
    key = unsaved_key(Decimal(10))  # room for some 2,600 holds: slices

    async def scenario() -> None:
        first, *drawn = await held_in_order(key, 21)
        assert first.draw is None and all(hold.draw is not None for hold in drawn)

        # A hold from the ledger: settled when the response's end has waited for it.
        first.charge(COST)
        await first.settled()
        assert read_now(lambda: spent(key)) == COST

        # The draws: nothing to wait for, and nothing settled yet...
        for hold in drawn:
            assert hold.charge(COST) == COST
            await hold.settled()
        assert read_now(lambda: spent(key)) == COST
        # ...until their batch is committed: all of them, at once.
        await settlements_drained()
        assert read_now(lambda: spent(key)) == COST * 21
        run_ids = [hold.run_id for hold in drawn]
        # Settled before their rows were stored: each leaves its marker, in one transaction.
        assert read_now(lambda: BudgetHold.objects.filter(run_id__in=run_ids).count()) == 20
        assert read_now(lambda: transactions_of(run_ids)) == 1
        await release_budget_slices()

    asyncio.run(scenario())


def test_a_slice_s_draws_are_settled_within_the_deferral_without_anyone_waiting() -> None:
    key = unsaved_key(Decimal(10))

    async def scenario() -> None:
        _, *drawn = await held_in_order(key, 4)
        for hold in drawn:
            hold.charge(COST)
        await asyncio.sleep(holds.DEFERRED_SECONDS / 2)
        assert read_now(lambda: spent(key)) == 0  # the ledger hold was never charged
        await asyncio.sleep(holds.DEFERRED_SECONDS + 2)  # the timer, then the round trip
        assert read_now(lambda: spent(key)) == COST * 3
        await release_budget_slices()

    asyncio.run(scenario())


def test_a_full_batch_of_draws_goes_to_the_ledger_without_waiting_for_the_deferral(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(holds, "DEFERRED_SECONDS", 3600.0)
    monkeypatch.setattr(holds, "DEFERRED_BATCH", 5)
    key = unsaved_key(Decimal(10))

    async def scenario() -> None:
        _, *drawn = await held_in_order(key, 8)
        for hold in drawn[:5]:
            hold.charge(COST)
        for _ in range(200):  # the fifth started the batch: a round trip away
            await asyncio.sleep(0.01)
            if read_now(lambda: spent(key)) == COST * 5:
                break
        assert read_now(lambda: spent(key)) == COST * 5
        for hold in drawn[5:]:  # two more: below the batch size, they wait for the deferral
            hold.charge(COST)
        await asyncio.sleep(0.3)
        assert read_now(lambda: spent(key)) == COST * 5
        await settlements_drained()  # as a stopping worker does
        assert read_now(lambda: spent(key)) == COST * 7
        await release_budget_slices()

    asyncio.run(scenario())
