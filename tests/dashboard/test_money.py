"""Money in the dashboard: a currency symbol and as many decimals as the amount needs."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.template import Context, Template

from dashboard.templatetags.dashboard import money


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (Decimal("1234567.891"), "$1,234,567.89"),
        (Decimal("15"), "$15.00"),
        (Decimal("4.5"), "$4.50"),
        (Decimal("0.5"), "$0.50"),
        (Decimal("0.1234567"), "$0.1235"),
        (Decimal("0.001"), "$0.0010"),
        (Decimal("0.000045123"), "$0.000045"),
        (Decimal("0.000001"), "$0.000001"),
        (Decimal("0.0000004"), "<$0.000001"),
        (Decimal("0"), "$0.00"),
        (Decimal("0.010000000"), "$0.01"),  # a cost column's trailing zeros
        (Decimal("-2.5"), "-$2.50"),
        (0.3, "$0.30"),  # a float as written, not as stored in binary
        (None, "—"),
    ],
)
def test_amounts_read_as_money(amount: Decimal | float | None, shown: str) -> None:
    assert money(amount) == shown


def test_templates_use_it_as_a_filter() -> None:
    template = Template("{% load dashboard %}{{ amount|money }}")
    assert template.render(Context({"amount": Decimal("0.000123456")})) == "$0.000123"
