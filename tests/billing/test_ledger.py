"""The budget ledger's arithmetic: holds that fit or lower the cap, 402, charges, releases,
periods and standings — the same on Postgres (its SQL functions) and SQLite (its Python twin)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from billing.budgets import Budget, period_start, resets_at
from billing.costs import Prices
from billing.errors import InsufficientQuota
from billing.ledger.entries import Held, HoldRequest, Settlement
from billing.models import BudgetHold, BudgetSpend
from billing.selectors import budget_standing
from billing.services.holds import HeldBudget
from billing.services.ledger import budget_hold, budget_holds, budget_holds_settle

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
# Awkward prices: $3.7 per million input tokens, $11.3 per million output tokens.
# No real key's id: other tests commit ledger rows of their keys.
KEY_ID = 10**12
PRICES = Prices(input=Decimal("3.7"), output=Decimal("11.3"))


def hold(run_id: str, budget: Budget, *, prompt: int = 1000, cap: int = 4096) -> int:
    return budget_hold(
        run_id=run_id,
        budgets=[budget],
        prompt_tokens=prompt,
        max_tokens=cap,
        prices=PRICES,
        expires_at=NOW + timedelta(minutes=11),
        now=NOW,
    ).max_tokens


def spend() -> BudgetSpend:
    return BudgetSpend.objects.get(owner="key", owner_id=KEY_ID)


def test_a_hold_that_fits_keeps_the_cap_and_holds_the_prompt_and_the_whole_cap() -> None:
    budget = Budget("key", KEY_ID, Decimal("1"), "month")
    assert hold("run-1", budget) == 4096

    row = spend()
    # 1000 * $0.0000037 + 4096 * $0.0000113 = $0.0499848, rounded up to the micro-dollar
    assert (row.spent_usd, row.held_usd) == (Decimal(0), Decimal("0.049985"))
    assert BudgetHold.objects.get(run_id="run-1").prompt_usd == Decimal("0.003700")


def test_the_cap_is_lowered_to_exactly_what_is_left() -> None:
    budget = Budget("key", KEY_ID, Decimal("0.040000"), "month")
    cap = hold("run-1", budget)

    prompt_usd = Decimal("0.0037")
    per_token = Decimal("0.0000113")
    assert cap == int((budget.usd - prompt_usd) / per_token) == 3212
    row = spend()
    assert row.held_usd == Decimal("0.039996")  # 0.0037 + 3212 * 0.0000113, rounded up
    assert row.held_usd + per_token > budget.usd  # one more token would not have fitted


def test_a_budget_that_cannot_pay_the_prompt_and_one_token_refuses_and_holds_nothing() -> None:
    budget = Budget(
        "key", KEY_ID, Decimal("0.003711"), "total"
    )  # the prompt + one token is 0.0037113
    with pytest.raises(InsufficientQuota) as refused:
        hold("run-1", budget)

    assert (refused.value.status, refused.value.code) == (402, "insufficient_quota")
    assert not BudgetHold.objects.filter(run_id="run-1").exists()
    assert not BudgetSpend.objects.filter(owner_id=KEY_ID, held_usd__gt=0).exists()


def test_a_charge_is_settled_as_its_run_decided_it_and_counted_once() -> None:
    budget = Budget("key", KEY_ID, Decimal("1"), "day")
    hold("run-1", budget, cap=10)  # holds 0.0037 + 0.000113 = 0.003813
    hold("run-2", budget, cap=10)

    charged = budget_holds_settle([Settlement("run-1", Decimal("0.001235"))])
    assert charged == {"run-1": Decimal("0.001235")}
    assert budget_holds_settle([Settlement("run-1", Decimal("0.002"))]) == {}  # settled already
    charged = budget_holds_settle([Settlement("run-2", Decimal("0.003813"))])  # the whole hold
    assert charged == {"run-2": Decimal("0.003813")}

    row = spend()
    assert (row.spent_usd, row.held_usd) == (Decimal("0.005048"), Decimal(0))


@pytest.mark.parametrize(
    "charged",
    [Decimal("0.003814"), Decimal("-0.000001"), Decimal("0.0012341")],
    ids=["more-than-held", "negative", "finer-than-a-micro-dollar"],
)
def test_a_charge_outside_its_hold_is_refused_and_moves_nothing(charged: Decimal) -> None:
    """The ledger enforces what a run's close decides (`charge_for`), rather than working a
    charge out again: a batch with one charge outside its hold is refused whole."""
    budget = Budget("key", KEY_ID, Decimal("1"), "day")
    hold("run-1", budget, cap=10)  # 0.003813
    hold("run-2", budget, cap=10)

    with pytest.raises(IntegrityError), transaction.atomic():
        budget_holds_settle([Settlement("run-1", Decimal("0.001")), Settlement("run-2", charged)])

    assert set(BudgetHold.objects.values_list("run_id", flat=True)) >= {"run-1", "run-2"}
    row = spend()
    assert (row.spent_usd, row.held_usd) == (Decimal(0), Decimal("0.007626"))


def test_a_hold_released_uncharged_gives_its_whole_amount_back() -> None:
    budget = Budget("key", KEY_ID, Decimal("1"), "total")
    hold("run-1", budget, cap=10)

    assert budget_holds_settle([Settlement("run-1", Decimal(0))]) == {"run-1": Decimal(0)}

    assert not BudgetHold.objects.filter(run_id="run-1").exists()
    row = spend()
    assert (row.spent_usd, row.held_usd) == (Decimal(0), Decimal(0))


def test_a_run_s_hold_is_charged_once_rounded_up_never_more_than_it_held() -> None:
    held = HeldBudget(run_id="run-1", amount_usd=Decimal("0.003813"), max_tokens=10)

    assert held.charge(Decimal("0.5")) == Decimal("0.003813")
    assert held.charge(Decimal(0)) == Decimal("0.003813")  # the first charge counts
    released = HeldBudget(run_id="run-2", amount_usd=Decimal("0.003813"), max_tokens=10)
    assert released.charge(Decimal(0)) == Decimal(0)
    assert released.charge(Decimal("0.001")) == Decimal(0)
    rounded = HeldBudget(run_id="run-3", amount_usd=Decimal("0.003813"), max_tokens=10)
    assert rounded.charge(Decimal("0.0000001")) == Decimal("0.000001")  # up, to a micro-dollar


def test_a_standing_counts_the_current_period_s_charges_and_holds() -> None:
    budget = Budget("key", KEY_ID, Decimal("1"), "day")
    hold("run-1", budget, cap=10)  # 0.003813 each
    hold("run-2", budget, cap=10)
    budget_holds_settle([Settlement("run-1", Decimal("0.001"))])

    today = budget_standing(budget, now=NOW)
    assert (today.spent_usd, today.held_usd, today.remaining_usd) == (
        Decimal("0.001"),
        Decimal("0.003813"),
        Decimal("0.995187"),
    )
    assert (today.budget_usd, today.period) == (Decimal("1"), "day")
    assert today.resets_at == datetime(2027, 1, 1, tzinfo=UTC)

    tomorrow = budget_standing(budget, now=NOW + timedelta(days=1))
    assert (tomorrow.spent_usd, tomorrow.held_usd, tomorrow.remaining_usd) == (
        Decimal(0),
        Decimal(0),
        Decimal("1"),
    )
    assert tomorrow.resets_at == datetime(2027, 1, 2, tzinfo=UTC)

    lowered = Budget("key", KEY_ID, Decimal("0.002"), "day")  # below what was spent and held
    assert budget_standing(lowered, now=NOW).remaining_usd == Decimal(0)


def test_periods_start_and_reset_at_utc_midnight() -> None:
    assert period_start("day", NOW) == date(2026, 12, 31)
    assert period_start("month", NOW) == date(2026, 12, 1)
    assert period_start("total", NOW) == date(1970, 1, 1)
    assert resets_at("day", NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    assert resets_at("month", NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    assert resets_at("month", datetime(2027, 1, 31, 12, tzinfo=UTC)) == datetime(
        2027, 2, 1, tzinfo=UTC
    )
    assert resets_at("total", NOW) is None


def test_a_batch_settles_each_run_on_both_its_budgets_once_and_skips_runs_without_a_hold() -> None:
    organization = Budget("organization", KEY_ID, Decimal("1"), "month")
    key = Budget("key", KEY_ID, Decimal("1"), "month")
    for run_id in ("run-1", "run-2", "run-3"):
        budget_hold(
            run_id=run_id,
            budgets=[organization, key],
            prompt_tokens=1000,
            max_tokens=10,
            prices=PRICES,
            expires_at=NOW + timedelta(minutes=11),
            now=NOW,
        )  # each holds 0.003813 on both

    charged = budget_holds_settle(
        [
            Settlement("run-1", Decimal("0.001")),
            Settlement("run-2", Decimal("0.000001")),
            Settlement("run-3", Decimal("0.003813")),  # the whole hold
            Settlement("never-held", Decimal("1")),  # no hold: nothing to check or charge
        ]
    )
    assert charged == {
        "run-1": Decimal("0.001000"),
        "run-2": Decimal("0.000001"),
        "run-3": Decimal("0.003813"),
    }
    assert budget_holds_settle([Settlement("run-1", Decimal("0.002"))]) == {}  # settled already
    assert not BudgetHold.objects.filter(run_id__in=["run-1", "run-2", "run-3"]).exists()
    for row in BudgetSpend.objects.filter(owner_id=KEY_ID):
        assert (row.spent_usd, row.held_usd) == (Decimal("0.004814"), Decimal(0))


def test_a_batch_of_holds_is_taken_in_order_each_on_what_the_ones_before_it_left() -> None:
    """The holds one worker takes together: in the batch's order, in one transaction; the
    period's rows are created by the batch's first hold, once, and a refusal holds nothing
    and does not undo the others."""
    organization = Budget("organization", KEY_ID, Decimal("1"), "month")
    # 0.003813 a hold of 1000 prompt tokens and 10 output tokens: two fit whole, the third
    # only with its cap lowered, the fourth cannot pay its prompt and one token.
    key = Budget("key", KEY_ID, Decimal("0.011383"), "month")
    other_key = Budget("key", KEY_ID + 1, Decimal("1"), "day")  # another budget, same batch

    def request(run_id: str, *budgets: Budget) -> HoldRequest:
        expires = NOW + timedelta(minutes=11)
        return HoldRequest(run_id, list(budgets), 1000, 10, PRICES, expires)

    answers = budget_holds(
        [
            request("run-1", organization, key),
            request("run-2", organization, key),
            request("run-other", other_key),
            request("run-3", organization, key),
            request("run-4", organization, key),
        ],
        now=NOW,
    )
    assert [type(a) for a in answers] == [Held, Held, Held, Held, InsufficientQuota]
    caps = [a.max_tokens for a in answers if isinstance(a, Held)]
    # What run-3 can pay: 0.011383 - 2 * 0.003813 - 0.0037 = 0.000057, 5 tokens at 0.0000113
    assert caps == [10, 10, 10, 5]
    assert (answers[4].status, answers[4].code) == (402, "insufficient_quota")
    # (Not the slices the suite's servers may hold on budgets of their own.)
    runs_held = BudgetHold.objects.exclude(run_id__startswith="slice-")
    assert set(runs_held.values_list("run_id", flat=True)) == {
        "run-1",
        "run-2",
        "run-3",
        "run-other",
    }
    key_row = spend()
    # 0.0037 + 5 * 0.0000113 = 0.0037565, rounded up: the budget, to the micro-dollar
    assert key_row.held_usd == Decimal("0.003813") * 2 + Decimal("0.003757") == key.usd
    other = BudgetSpend.objects.get(owner="key", owner_id=KEY_ID + 1)
    assert other.held_usd == Decimal("0.003813")
    org_row = BudgetSpend.objects.get(owner="organization", owner_id=KEY_ID)
    assert org_row.held_usd == key_row.held_usd
