"""Formatting for the dashboard's templates: durations, ratios, money, asset URLs, the version."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django import template
from django.urls import reverse

from dashboard.access import Access, access_of
from mortar import __version__

register = template.Library()


@register.simple_tag
def asset(path: str) -> str:
    return reverse("dashboard:asset", args=[path])


@register.simple_tag
def mortar_version() -> str:
    """The release this server runs, for the footer of every page."""
    return __version__


@register.filter
def dashboard_access(user: Any) -> Access | None:
    """`user|dashboard_access`: what the user may see on the dashboard, or None (nothing)."""
    return access_of(user)


@register.filter
def ms(value: timedelta | float | None) -> str:
    """A duration in milliseconds: `1,234 ms`."""
    if value is None or value == "":
        return "—"
    if isinstance(value, timedelta):
        value = value.total_seconds() * 1000
    return f"{float(value):,.0f} ms"


@register.filter
def since(end: datetime | None, start: datetime | None) -> timedelta | None:
    """`finished_at|since:accepted_at` — the time between two moments."""
    if end is None or start is None:
        return None
    return end - start


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{float(value) * 100:.1f}%"


CURRENCY = "$"  # prices, costs and budgets are in USD (the price list, `budget_usd`)


@register.filter
def money(value: Decimal | float | None) -> str:
    """An amount of money as an operator reads it: `$1,234.57`, `$0.50`, `$0.0123`, `$0.000045`.

    Two decimals, or more where they would lose the amount: at most two from a dollar up, four
    from a cent, six below (a run's cost is often a fraction of a cent). Amounts below
    $0.000001 read `<$0.000001` rather than `$0.000000`. Exact figures stay in the database,
    the run's JSON and the audit CSV.
    """
    if value is None or value == "":
        return "—"
    # Through str for floats: Decimal(0.3) would be 0.29999999999999998889776975.
    amount = value if isinstance(value, Decimal) else Decimal(str(value))
    sign, size = ("-" if amount < 0 else ""), abs(amount)
    if size == 0:
        return f"{CURRENCY}0.00"
    if size < Decimal("0.000001"):
        return f"{sign}<{CURRENCY}0.000001"
    most = 2 if size >= 1 else 4 if size >= Decimal("0.01") else 6
    places = next((p for p in (2, 4) if p < most and size == round(size, p)), most)
    return f"{sign}{CURRENCY}{size:,.{places}f}"


@register.filter
def count(value: int | float | None) -> str:
    return "—" if value is None else f"{int(value):,}"


@register.filter
def utc(value: datetime | None) -> str:
    return "—" if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@register.filter
def share(part: int | float | None, whole: int | float | None) -> float | None:
    """`errors|share:total` — the part's fraction of the whole, for `percent`."""
    if part is None or not whole:
        return None
    return float(part) / float(whole)
