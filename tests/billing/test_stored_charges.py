"""The run writer only records a run's charge: its worker settled it on the budgets when the
response ended. Storing the outcome — in a later batch, in the batch that opens it, or replayed
from a spool — moves no money, on either database; a hold its worker could not settle is left
for the reconciliation."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from accounts.models import Organization
from billing.budgets import Budget
from billing.costs import Prices
from billing.ledger.entries import Settlement
from billing.models import BudgetHold, BudgetSpend
from billing.services.ledger import budget_hold, budget_holds_settle
from telemetry.models import Run
from telemetry.store.batches import write_batch
from telemetry.store.items import RunClosed, RunOpened

pytestmark = pytest.mark.django_db

# No real key's id: other tests commit ledger rows of their keys.
KEY_ID = 10**12 + 20
PRICES = Prices(input=Decimal("3.7"), output=Decimal("11.3"))
HELD = Decimal("0.003813")  # 1000 prompt tokens and 10 output tokens at PRICES, rounded up
CHARGED = Decimal("0.001235")


def held_run(organization: Organization) -> tuple[str, RunOpened]:
    """A run held on a key's budget, and its opened row as the pipeline hands it over."""
    run_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    now = datetime.now(UTC)
    budget_hold(
        run_id=run_id,
        budgets=[Budget(BudgetSpend.Owner.KEY, KEY_ID, Decimal(1), "total")],
        prompt_tokens=1000,
        max_tokens=10,
        prices=PRICES,
        expires_at=now + timedelta(minutes=5),
        now=now,
    )
    opened = RunOpened(
        {
            "id": run_id,
            "accepted_at": now,
            "organization_id": organization.id,
            "status": Run.Status.IN_PROGRESS,
            "held_usd": HELD,
        }
    )
    return run_id, opened


def spend() -> tuple[Decimal, Decimal]:
    row = BudgetSpend.objects.get(owner=BudgetSpend.Owner.KEY, owner_id=KEY_ID)
    return row.spent_usd, row.held_usd


@pytest.fixture
def organization() -> Organization:
    return Organization.objects.create(name=f"charges-{uuid.uuid4().hex[:12]}")


@pytest.mark.parametrize("one_batch", [False, True], ids=["later-batch", "one-batch"])
def test_a_stored_charge_moves_no_money_the_worker_s_settlement_does(
    organization: Organization, one_batch: bool
) -> None:
    run_id, opened = held_run(organization)
    closed = RunClosed(run_id, {"status": Run.Status.COMPLETED, "charged_usd": CHARGED})
    if one_batch:
        write_batch([opened, closed])
    else:
        write_batch([opened])
        write_batch([closed])
    write_batch([opened, closed], replay=True)  # again (a spool, a dead writer's log)

    assert Run.objects.get(id=run_id).charged_usd == CHARGED
    assert BudgetHold.objects.get(run_id=run_id).amount_usd == HELD
    assert spend() == (Decimal(0), HELD)

    assert budget_holds_settle([Settlement(run_id, CHARGED)]) == {run_id: CHARGED}
    assert budget_holds_settle([Settlement(run_id, CHARGED)]) == {}  # once
    assert not BudgetHold.objects.filter(run_id=run_id).exists()
    assert spend() == (CHARGED, Decimal(0))


def test_a_run_released_uncharged_gives_its_whole_hold_back(organization: Organization) -> None:
    run_id, opened = held_run(organization)
    write_batch(
        [opened, RunClosed(run_id, {"status": Run.Status.REFUSED, "charged_usd": Decimal(0)})]
    )

    assert budget_holds_settle([Settlement(run_id, Decimal(0))]) == {run_id: Decimal(0)}
    assert not BudgetHold.objects.filter(run_id=run_id).exists()
    assert spend() == (Decimal(0), Decimal(0))


def test_a_hold_its_worker_never_settled_is_left_for_the_reconciliation(
    organization: Organization,
) -> None:
    run_id, opened = held_run(organization)

    write_batch([opened, RunClosed(run_id, {"status": Run.Status.FAILED})])

    assert BudgetHold.objects.get(run_id=run_id).amount_usd == HELD
    assert spend() == (Decimal(0), HELD)
