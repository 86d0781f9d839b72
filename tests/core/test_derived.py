"""What the hot path derives from a key is derived once per key object, and again for a new
object — a key read again after a change — even one equal to the old (same primary key)."""

from __future__ import annotations

from decimal import Decimal

from accounts.models import ApiKey, Organization
from billing.budgets import budgets_for
from billing.services.ratelimits import limits_of
from core.derived import PerObject


def test_a_value_is_derived_once_per_object_and_again_for_an_equal_new_one() -> None:
    calls: list[object] = []

    def derive(source: object) -> int:
        calls.append(source)
        return len(calls)

    derived = PerObject(derive)
    organization = Organization(id=7, name="o")
    first = ApiKey(id=1, organization=organization)
    assert derived(first) == derived(first) == 1
    reread = ApiKey(id=1, organization=organization)
    assert reread == first  # Django's equality: the primary key
    assert derived(reread) == 2
    assert calls == [first, reread]


def test_the_table_is_cleared_when_it_reaches_its_bound() -> None:
    derived = PerObject(lambda source: object(), bound=3)
    sources = [object() for _ in range(3)]
    values = [derived(source) for source in sources]
    assert [derived(source) for source in sources] == values  # all three kept
    derived(object())  # a fourth: the table is cleared first
    assert derived(sources[0]) is not values[0]


def test_a_changed_key_read_again_is_checked_against_its_new_budget_and_limits() -> None:
    organization = Organization(id=8, name="o", budget_usd=Decimal(5), requests_per_minute=10)
    key = ApiKey(id=3, organization=organization, budget_usd=None, tokens_per_minute=None)
    assert [budget.usd for budget in budgets_for(key)] == [Decimal(5)]
    assert [limit.name for limit in limits_of(key)] == ["org:8:requests"]

    changed = ApiKey(
        id=3,
        organization=organization,
        budget_usd=Decimal(2),
        budget_period="day",
        tokens_per_minute=1000,
    )
    assert [(budget.usd, budget.period) for budget in budgets_for(changed)] == [
        (Decimal(5), "month"),
        (Decimal(2), "day"),
    ]
    assert [limit.name for limit in limits_of(changed)] == ["org:8:requests", "key:3:tokens"]
