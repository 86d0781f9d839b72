"""The holds of one event-loop pass are taken together: one transaction, in arrival order.

Requests asking for holds at once (`hold_for`, as the pipeline calls it) share one batch — one
round trip and one commit on the ledger's thread — and each is answered as if taken alone in
the order they asked: the first come are held whole, the one that only partly fits gets its
cap lowered, the rest are refused. One transaction is visible in Postgres itself: the rows a
transaction inserts carry its id (`xmin`).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.db import connection

from accounts.models import ApiKey, Organization
from billing.costs import Prices
from billing.errors import InsufficientQuota
from billing.models import BudgetHold, BudgetSpend
from billing.services.holds import LEDGER_THREADS, HeldBudget, hold_for

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

PRICES = Prices(input=Decimal("3.7"), output=Decimal("11.3"))  # per million tokens
WHOLE_HOLD = Decimal("0.003813")
# Above any real id, and above the ids the ledger's other tests use (10**12 and a few more).
OWNER_IDS_FROM = 2 * 10**12  # 1000 prompt tokens and 10 output tokens, rounded up


def unsaved_key(budget_usd: Decimal) -> ApiKey:
    """A key with a budget, of an organization without one: ids no other test uses (the
    ledger's thread commits its rows)."""
    owner_id = OWNER_IDS_FROM + secrets.randbelow(10**9)
    organization = Organization(id=owner_id, name="batches")
    return ApiKey(
        id=owner_id, organization=organization, budget_usd=budget_usd, budget_period="total"
    )


def transactions_of(run_ids: list[str]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT xmin::text) FROM telemetry_budgethold WHERE run_id = ANY(%s)",
            [run_ids],
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


async def hold_one(key: ApiKey, run_id: str) -> HeldBudget:
    """Hold 1000 prompt tokens and 10 output tokens at PRICES, as the pipeline would."""
    held = await hold_for(
        run_id=run_id,
        key=key,
        prompt_tokens=1000,
        max_tokens=10,
        prices=PRICES,
        total_timeout_s=60,
    )
    assert held is not None
    return held


async def hold_at_once(key: ApiKey, run_ids: list[str]) -> list[HeldBudget | BaseException]:
    answers = await asyncio.gather(
        *(hold_one(key, run_id) for run_id in run_ids), return_exceptions=True
    )
    return [a for a in answers if isinstance(a, HeldBudget | BaseException)]


@pytest.fixture(autouse=True)
def ledger_rows_removed() -> Iterator[None]:
    """The ledger's thread commits what it holds, outside the test's transaction: its rows are
    deleted there after the test (the ledger's other tests count every hold), and its
    connection closed, so the test database can be dropped at the end of the run."""
    yield

    def remove() -> None:
        BudgetHold.objects.filter(run_id__startswith="batch-").delete()
        BudgetSpend.objects.filter(owner_id__gte=OWNER_IDS_FROM).delete()
        connection.close()

    LEDGER_THREADS.submit(remove).result()


def test_holds_asked_for_at_once_are_one_transaction_answered_in_arrival_order() -> None:
    # Room for four whole holds and a fifth of five output tokens (0.0037565, rounded up).
    key = unsaved_key(WHOLE_HOLD * 4 + Decimal("0.003757"))
    run_ids = [f"batch-{secrets.token_hex(6)}-{i}" for i in range(7)]

    answers = asyncio.run(hold_at_once(key, run_ids))

    held = [a for a in answers if isinstance(a, HeldBudget)]
    assert [a.max_tokens for a in held] == [10, 10, 10, 10, 5]
    assert [a.run_id for a in held] == run_ids[:5]  # first come, first served
    refused = answers[5:]
    assert all(isinstance(a, InsufficientQuota) for a in refused), refused
    assert transactions_of(run_ids) == 1  # one batch: one commit for all five holds
    spend = BudgetSpend.objects.get(owner="key", owner_id=key.id)
    assert spend.held_usd == key.budget_usd == sum(a.amount_usd for a in held)

    # A hold asked for later is a batch of its own.
    later = f"batch-{secrets.token_hex(6)}-later"
    other_key = unsaved_key(Decimal("1"))
    asyncio.run(hold_at_once(other_key, [later]))
    assert transactions_of([run_ids[0], later]) == 2
