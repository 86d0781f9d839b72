"""The range's sums in all (`spend_totals`) and per value of a breakdown (`usage_by`, or
several at once: `usage_by_each`): organization, key, end user, model or deployment, sorted and
cut in the database."""

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
    fresh_groups_sql,
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
    return usage_by_each(filters, {dimension: sort}, limit=limit, now=now)[dimension]


def usage_by_each(
    filters: SpendFilters,
    sorts: dict[str, str],
    *,
    limit: int | None = TOP,
    now: datetime | None = None,
) -> dict[str, list[Usage]]:
    """`usage_by` of each dimension of `sorts` (by its sort), in one query.

    The runs since the rollups' last refresh are grouped once, by every dimension's column (a
    CTE), and each breakdown sums those groups: a query per breakdown read all of those runs
    again, and at a high write rate they are most of the page's time (an hour of them, every
    run of the current hour)."""
    for dimension, sort in sorts.items():
        if dimension not in DIMENSIONS or sort not in ("cost", "errors", "requests"):
            raise ValueError(f"no breakdown {dimension!r} by {sort!r}")
    now = now or timezone.now()
    # One breakdown reads the runs itself: their groups by every column would only add work.
    shared = len(sorts) > 1
    fresh, params = fresh_groups_sql(filters, now=now) if shared else ("", [])
    selects = []
    for at, (dimension, sort) in enumerate(sorts.items()):
        union, union_params = grouped_sql(
            filters,
            grouped_by(dimension),
            grain=GRAIN[dimension],
            by_bucket=False,
            now=now,
            fresh_groups="fresh" if shared else None,
        )
        column = f"u.d_{dimension}"
        order = f"COALESCE(SUM(u.s_{sort}), 0) DESC, {column} ASC"  # s_cost, s_errors, …
        # Each breakdown's values as text in one column (read back by type below), in its
        # order: `place`, as a union keeps none.
        select = (
            f"SELECT {at} AS which, ROW_NUMBER() OVER (ORDER BY {order}) AS place,"
            f" CAST({column} AS TEXT) AS value, {OUTER_SUMS}"
            f" FROM ({union}) AS u GROUP BY {column}"
        )
        params += union_params
        if limit is not None:
            select += f" ORDER BY {order} LIMIT %s"
            params.append(limit)
        selects.append(f"SELECT * FROM ({select}) AS b{at}")
    sql = (f"WITH fresh AS ({fresh}) " if shared else "") + " UNION ALL ".join(selects)
    sql += " ORDER BY which, place"
    rows: dict[str, list[tuple[Any, Usage]]] = {dimension: [] for dimension in sorts}
    names = list(sorts)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for which, _, value, *sums in cursor.fetchall():
            dimension = names[which]
            rows[dimension].append((_typed(dimension, value), usage_of(sums)))
    found: dict[str, list[Usage]] = {}
    for dimension, values in rows.items():
        if dimension == "end_user" and values:
            saved = _end_user_savings(filters, [value for value, _ in values], now=now)
            for value, usage in values:
                usage.savings = saved.get(value, Decimal(0))
        labels = _labels(dimension, [value for value, _ in values])
        for value, usage in values:
            usage.value, usage.label = value, labels(value)
        found[dimension] = [usage for _, usage in values]
    return found


def _typed(dimension: str, value: str) -> Any:
    """A breakdown's value as `usage_by` returns it: organizations and keys are numbers."""
    return int(value) if dimension in ("organization", "key") else value


def _end_user_savings(
    filters: SpendFilters, end_users: list[str], *, now: datetime
) -> dict[str, Decimal]:
    """What caching saved each of `end_users`, from the rollups: their breakdowns keep no model to
    price cached tokens by (an index scan on `rollup_end_user_hour`)."""
    union, params = grouped_sql(
        filters,
        grouped_by("end_user"),
        grain="end_user",
        by_bucket=False,
        now=now,
        only=("end_user", end_users),
        day_breakdowns=False,
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
