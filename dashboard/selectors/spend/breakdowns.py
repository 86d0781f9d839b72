"""The range's sums in all (`spend_totals`) and per value of a breakdown (`usage_by`):
organization, key, end user, model or deployment, sorted and cut in the database."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection
from django.utils import timezone

from billing.costs import PER_MILLION
from dashboard.selectors.catalog import key_labels, organization_names
from dashboard.selectors.spend.sums import (
    DIMENSIONS,
    GRAIN,
    OUTER_SUMS,
    SpendFilters,
    Usage,
    grouped_by,
    grouped_sql,
    summed_decimal,
    usage_of,
)

TOP = 10  # rows of each table on the page (the CSV has them all)


def spend_totals(filters: SpendFilters, *, now: datetime | None = None) -> Usage:
    """The range's sums: requests, errors, tokens, cost and cache savings."""
    union, params = grouped_sql(
        filters, {}, grain="model", by_bucket=False, now=now or timezone.now()
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {OUTER_SUMS} FROM ({union}) AS u", params)
        return usage_of(cursor.fetchone())


def usage_by(
    filters: SpendFilters,
    dimension: str,
    *,
    limit: int | None = TOP,
    sort: str = "cost",
    now: datetime | None = None,
) -> list[Usage]:
    """The range's sums per value of `dimension`, the largest `sort` first (ties by value)."""
    if dimension not in DIMENSIONS or sort not in ("cost", "errors", "requests"):
        raise ValueError(f"no breakdown {dimension!r} by {sort!r}")
    now = now or timezone.now()
    union, params = grouped_sql(
        filters, grouped_by(dimension), grain=GRAIN[dimension], by_bucket=False, now=now
    )
    order = {"requests": 2, "errors": 3, "cost": 7}[sort]  # positions in the SELECT
    sql = f"""
        SELECT u.d_{dimension}, {OUTER_SUMS} FROM ({union}) AS u
        GROUP BY u.d_{dimension} ORDER BY {order} DESC, 1 ASC
    """
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = [(value, usage_of(sums)) for value, *sums in cursor.fetchall()]
    if dimension == "end_user" and rows:
        saved = _end_user_savings(filters, [value for value, _ in rows], now=now)
        for value, usage in rows:
            usage.savings = saved.get(value, Decimal(0))
    labels = _labels(dimension, [value for value, _ in rows])
    found = []
    for value, usage in rows:
        usage.value, usage.label = value, labels(value)
        found.append(usage)
    return found


def _end_user_savings(
    filters: SpendFilters, end_users: list[str], *, now: datetime
) -> dict[str, Decimal]:
    """What caching saved each of `end_users`, from the rollups: their slices keep no model to
    price cached tokens by (an index scan on `rollup_end_user_hour`)."""
    union, params = grouped_sql(
        filters,
        grouped_by("end_user"),
        grain="end_user",
        by_bucket=False,
        now=now,
        only=("end_user", end_users),
        day_slices=False,
    )
    sql = f"SELECT u.d_end_user, COALESCE(SUM(u.s_saved), 0) FROM ({union}) AS u GROUP BY 1"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {value: summed_decimal(saved) / PER_MILLION for value, saved in cursor.fetchall()}


def _labels(dimension: str, values: list[Any]) -> Any:
    """How a value of the dimension reads: names for organizations and keys."""
    if dimension == "organization":
        names = organization_names({int(v) for v in values})
        return lambda v: names.get(int(v), f"#{v}")
    if dimension == "key":
        keys = key_labels({int(v) for v in values if v})
        return lambda v: keys.get(int(v), "(no key)")
    return lambda v: v or "(none)"
