"""Formatting for the dashboard's templates: durations, ratios, costs and asset URLs."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django import template
from django.urls import reverse

register = template.Library()


@register.simple_tag
def asset(path: str) -> str:
    return reverse("dashboard:asset", args=[path])


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


@register.filter
def cost(value: Decimal | float | None) -> str:
    """Costs are in the price list's currency units; six decimals show sub-cent runs."""
    return "—" if value is None else f"{Decimal(value):,.6f}"


@register.filter
def count(value: int | float | None) -> str:
    return "—" if value is None else f"{int(value):,}"


@register.filter
def utc(value: datetime | None) -> str:
    return "—" if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
