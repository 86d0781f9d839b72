"""The reconciliation of expired holds (their worker died): each is charged from what its run
left stored — its cost, the prompt alone, or nothing — once, and a hold not yet expired is
left alone."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from accounts.models import Organization
from billing.budgets import Budget
from billing.costs import Prices
from billing.models import BudgetHold, BudgetSpend
from billing.services.ledger import budget_hold, budget_holds_reconcile
from telemetry.models import Run
from tests.support.runs import finished_run

pytestmark = pytest.mark.django_db

# No real key's id: other tests commit ledger rows of their keys.
KEY_ID = 10**12 + 30
# Long past: no hold the suite's servers commit expires before it, so a pass at THEN settles
# only this module's holds.
THEN = datetime(2001, 2, 3, 4, 5, tzinfo=UTC)
BUDGET = Budget(BudgetSpend.Owner.KEY, KEY_ID, Decimal(1), "total")
PRICES = Prices(input=Decimal("1.2"), output=Decimal("2"))
PROMPT_USD = Decimal("0.000120")  # 100 prompt tokens
HELD = Decimal("0.000320")  # and 100 output tokens


@pytest.fixture
def organization() -> Organization:
    return Organization.objects.create(name=f"reconcile-{uuid.uuid4().hex[:12]}")


def hold(run_id: str, *, expires_at: datetime = THEN - timedelta(seconds=1)) -> None:
    budget_hold(
        run_id=run_id,
        budgets=[BUDGET],
        prompt_tokens=100,
        max_tokens=100,
        prices=PRICES,
        expires_at=expires_at,
        now=THEN,
    )


def spend() -> tuple[Decimal, Decimal]:
    row = BudgetSpend.objects.get(owner=BudgetSpend.Owner.KEY, owner_id=KEY_ID)
    return row.spent_usd, row.held_usd


def test_an_expired_hold_is_charged_its_run_s_stored_cost_capped_at_the_hold(
    organization: Organization,
) -> None:
    cheap = finished_run(organization, THEN, cost=Decimal("0.000250"))
    dear = finished_run(organization, THEN, cost=Decimal("0.5"))
    hold(cheap.id)
    hold(dear.id)

    assert budget_holds_reconcile(now=THEN) == 2

    stored = dict(Run.objects.filter(id__in=[cheap.id, dear.id]).values_list("id", "charged_usd"))
    assert stored == {cheap.id: Decimal("0.000250"), dear.id: HELD}
    assert Run.objects.get(id=cheap.id).held_usd == HELD
    assert not BudgetHold.objects.filter(run_id__in=[cheap.id, dear.id]).exists()
    assert spend() == (Decimal("0.000250") + HELD, Decimal(0))


def test_a_run_never_stored_is_charged_its_prompt_and_one_closed_without_cost_nothing(
    organization: Organization,
) -> None:
    never_stored = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    refused = finished_run(organization, THEN, status=Run.Status.REFUSED, cost=None)
    hold(never_stored)
    hold(refused.id)

    assert budget_holds_reconcile(now=THEN) == 2

    assert Run.objects.get(id=refused.id).charged_usd == Decimal(0)
    assert spend() == (PROMPT_USD, Decimal(0))


def test_a_pass_settles_a_hold_once_and_leaves_one_not_yet_expired(
    organization: Organization,
) -> None:
    expired = finished_run(organization, THEN, cost=Decimal("0.0001"))
    live = finished_run(organization, THEN, cost=Decimal("0.0001"))
    hold(expired.id)
    hold(live.id, expires_at=THEN + timedelta(seconds=1))

    assert budget_holds_reconcile(now=THEN) == 1
    assert budget_holds_reconcile(now=THEN) == 0  # safe to run twice

    assert BudgetHold.objects.get(run_id=live.id).amount_usd == HELD
    assert spend() == (Decimal("0.000100"), HELD)
