"""The cost and cache audit: usage summed by organization, key, end user, model and day (any
subset; by organization unless the operator chooses), sortable, paged on the page (`PAGE_SIZE`
rows), every row in the CSV export.

The sums come from where Spend's do: the hourly rollups before the hour of their last refresh,
the runs themselves from that hour on, put together in SQL (`UNION ALL`, grouped again, sorted
and cut in the database). Days are UTC days of the runs' acceptance, and only finished runs
count (see `telemetry/services/rollups.py`): a run still streaming is counted once it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, Count, F, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, TruncDate

from accounts.models import Organization
from dashboard.selectors.catalog import key_labels
from dashboard.selectors.overview import fresh_since
from dashboard.selectors.scope import of_organizations
from dashboard.selectors.spend.sums import summed_decimal
from telemetry.models import Run, UsageRollup
from telemetry.services.rollups import usage_rollups_watermark

AUDIT_DIMENSIONS = ("organization", "key", "end_user", "model", "day")
AUDIT_MEASURES = (
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cache_hit_ratio",
    "cost",
)
AUDIT_SORTS = tuple(
    f"{sign}{name}" for name in (*AUDIT_DIMENSIONS, *AUDIT_MEASURES) for sign in ("-", "")
)
PAGE_SIZE = 50
DEFAULT_GROUP = ("organization",)
SORT_COLUMN = {
    "organization": "organization__name",
    "key": "api_key_id",
    "end_user": "end_user",
    "model": "model",
    "day": "day",
}
CSV_HEADER = [*AUDIT_DIMENSIONS, *AUDIT_MEASURES]


@dataclass(frozen=True)
class AuditQuery:
    since: date
    until: date  # inclusive
    organization_id: int | None = None
    organizations: frozenset[int] | None = None  # those the user sees; None: every one
    group: tuple[str, ...] = DEFAULT_GROUP
    sort: str = "-cost"


@dataclass(frozen=True)
class AuditPage:
    rows: list[dict[str, Any]]
    number: int  # from 1
    pages: int
    total_rows: int

    @property
    def first(self) -> int:
        """The position of the page's first row, from 1 (0 on an empty page)."""
        return (self.number - 1) * PAGE_SIZE + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.first + len(self.rows) - 1 if self.rows else 0


def _now() -> datetime:
    return datetime.now(UTC)


def _sources(query: AuditQuery, *, now: datetime) -> list[QuerySet[Any, Any]]:
    """The rollups before the hours of their last refresh and the runs from then on, grouped
    alike by every audit dimension: the sources and the boundary Spend and the Overview read,
    so the three pages agree at any moment (a run counts the moment it is stored, not when
    its hour is next rolled up)."""
    start = datetime.combine(query.since, time.min, tzinfo=UTC)
    end = datetime.combine(query.until + timedelta(days=1), time.min, tzinfo=UTC)
    fresh = fresh_since(now, usage_rollups_watermark())
    rollups = UsageRollup.objects.filter(hour__gte=start, hour__lt=min(end, fresh))
    runs = Run.objects.filter(accepted_at__gte=max(start, fresh), accepted_at__lt=end).exclude(
        status=Run.Status.IN_PROGRESS
    )
    rollups = of_organizations(rollups, query.organization_id, query.organizations)
    runs = of_organizations(runs, query.organization_id, query.organizations)
    from_rollups = (
        rollups.annotate(
            a_organization=F("organization_id"),
            a_key=F("api_key_id"),
            a_end_user=F("end_user"),
            a_model=F("model"),
            a_day=TruncDate("hour", tzinfo=UTC),
        )
        .values(*SOURCE_COLUMNS)
        .annotate(
            s_requests=Sum("requests"),
            s_prompt=Sum("prompt_tokens"),
            s_completion=Sum("completion_tokens"),
            s_cached=Sum("cached_tokens"),
            s_cost=Sum("cost"),
        )
    )
    from_runs = (
        runs.annotate(
            a_organization=F("organization_id"),
            # 0 for a run without a key, as the rollups store it.
            a_key=Coalesce(F("api_key_id"), Value(0), output_field=BigIntegerField()),
            a_end_user=F("end_user"),
            a_model=F("model"),
            a_day=TruncDate("accepted_at", tzinfo=UTC),
        )
        .values(*SOURCE_COLUMNS)
        .annotate(
            s_requests=Count("pk"),
            s_prompt=Sum("prompt_tokens"),
            s_completion=Sum("completion_tokens"),
            s_cached=Sum("cached_tokens"),
            s_cost=Sum("cost"),
        )
    )
    return [from_rollups, from_runs]


SOURCE_COLUMNS = ("a_organization", "a_key", "a_end_user", "a_model", "a_day")
# Each dimension's columns in the grouped rows: the name a row has, what it is in SQL.
GROUP_SQL = {
    "organization": (("organization_id", "u.a_organization"), ("organization__name", "o.name")),
    "key": (("api_key_id", "u.a_key"),),
    "end_user": (("end_user", "u.a_end_user"),),
    "model": (("model", "u.a_model"),),
    "day": (("day", "u.a_day"),),
}
MEASURE_SQL = (
    ("requests", "COALESCE(SUM(u.s_requests), 0)"),
    ("prompt_tokens", "COALESCE(SUM(u.s_prompt), 0)"),
    ("completion_tokens", "COALESCE(SUM(u.s_completion), 0)"),
    ("cached_tokens", "COALESCE(SUM(u.s_cached), 0)"),
    # NULL without prompt tokens: no ratio, sorted last either way.
    ("cache_hit_ratio", "COALESCE(SUM(u.s_cached), 0) * 1.0 / NULLIF(SUM(u.s_prompt), 0)"),
    ("cost", "COALESCE(SUM(u.s_cost), 0)"),
)


def _grouped_sql(query: AuditQuery, *, now: datetime) -> tuple[str, list[Any], list[str]]:
    """The grouped rows as one query (the sources' `UNION ALL`, grouped again), unsorted;
    with its parameters and the names of its columns."""
    sqls: list[str] = []
    params: list[Any] = []
    for source in _sources(query, now=now):
        sql, source_params = source.order_by().query.sql_with_params()
        sqls.append(sql)
        params.extend(source_params)
    quote = connection.ops.quote_name
    columns = [pair for dimension in query.group for pair in GROUP_SQL[dimension]]
    selected = [*columns, *MEASURE_SQL]
    grouped = [expression for _, expression in columns]
    join = ""
    if "organization" in query.group:
        join = f"LEFT JOIN {quote(Organization._meta.db_table)} o ON o.id = u.a_organization"
    sql = (
        f"SELECT {', '.join(f'{expression} AS {quote(name)}' for name, expression in selected)} "
        f"FROM ({' UNION ALL '.join(sqls)}) u {join}"
        + (f" GROUP BY {', '.join(grouped)}" if grouped else "")
    )
    return sql, params, [name for name, _ in selected]


def _order_by(query: AuditQuery) -> str:
    name = query.sort.lstrip("-")
    if name in AUDIT_DIMENSIONS and name not in query.group:
        name, descending = "cost", True
    else:
        descending = query.sort.startswith("-")
    quote = connection.ops.quote_name
    column = quote(SORT_COLUMN.get(name, name))
    tie_breaks = [f"{quote(SORT_COLUMN[d])} ASC" for d in query.group]
    first = f"{column} {'DESC' if descending else 'ASC'} NULLS LAST"
    return "ORDER BY " + ", ".join([first, *tie_breaks])


def _row(names: list[str], values: tuple[Any, ...]) -> dict[str, Any]:
    row = dict(zip(names, values, strict=True))
    for name in ("requests", "prompt_tokens", "completion_tokens", "cached_tokens"):
        row[name] = int(row[name])
    row["cost"] = summed_decimal(row["cost"])
    ratio = row["cache_hit_ratio"]
    row["cache_hit_ratio"] = None if ratio is None else float(ratio)
    if isinstance(row.get("day"), str):  # SQLite's dates are text
        row["day"] = date.fromisoformat(row["day"])
    return row


def audit_rows(
    query: AuditQuery, *, limit: int | None = None, offset: int = 0, now: datetime | None = None
) -> list[dict[str, Any]]:
    """The grouped rows, sorted, with each key's label; `limit` of them from `offset`."""
    sql, params, names = _grouped_sql(query, now=now or _now())
    sql += " " + _order_by(query)
    if limit is not None:
        sql += " LIMIT %s OFFSET %s"
        params = [*params, limit, offset]
    elif offset:
        raise ValueError("an offset needs a limit")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = [_row(names, values) for values in cursor.fetchall()]
    if "key" in query.group:
        labels = key_labels({row["api_key_id"] for row in found})
        for row in found:
            row["key_label"] = labels.get(row["api_key_id"], "(no key)")
    return found


def audit_page(query: AuditQuery, *, number: int, now: datetime | None = None) -> AuditPage:
    """Page `number` (from 1) of the rows; a page past the last is the last. The rows are
    groups of the rollups of at most a few days and of the last hours' runs, so counting them
    is a small query."""
    now = now or _now()
    sql, params, _ = _grouped_sql(query, now=now)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM ({sql}) g", params)
        total = int(cursor.fetchone()[0])
    pages = max(1, -(-total // PAGE_SIZE))
    number = min(max(number, 1), pages)
    rows = audit_rows(query, limit=PAGE_SIZE, offset=(number - 1) * PAGE_SIZE, now=now)
    return AuditPage(rows=rows, number=number, pages=pages, total_rows=total)


def audit_totals(query: AuditQuery, *, now: datetime | None = None) -> dict[str, Any]:
    """The sums of every row: the same sources, not grouped."""
    [totals] = audit_rows(replace(query, group=()), now=now)
    return totals


def audit_csv_rows(query: AuditQuery) -> Iterator[list[Any]]:
    """The header, then every row (no limit), the columns of dimensions not grouped by empty."""
    yield CSV_HEADER
    for row in audit_rows(query):
        ratio = row["cache_hit_ratio"]
        yield [
            row.get("organization__name", ""),
            row.get("key_label", ""),
            row.get("end_user", ""),
            row.get("model", ""),
            row["day"].isoformat() if row.get("day") else "",
            row["requests"],
            row["prompt_tokens"],
            row["completion_tokens"],
            row["cached_tokens"],
            "" if ratio is None else f"{ratio:.4f}",
            row["cost"],
        ]
