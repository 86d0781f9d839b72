"""The cost and cache audit: the hourly rollups summed by organization, key, end user, model
and day (any subset; by organization unless the operator chooses), sortable, paged on the page
(`PAGE_SIZE` rows), every row in the CSV export.

Days are UTC days of the runs' acceptance, and only finished runs are in the rollups (see
`telemetry/services/rollups.py`): a run still streaming is counted once it ends and its hour
is recomputed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import F, FloatField, QuerySet, Sum, Value
from django.db.models.functions import Cast, NullIf, TruncDate

from dashboard.selectors.catalog import key_labels
from dashboard.selectors.scope import of_organizations
from telemetry.models import UsageRollup

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
# Each dimension's value columns in the grouped query.
GROUP_COLUMNS = {
    "organization": ("organization_id", "organization__name"),
    "key": ("api_key_id",),
    "end_user": ("end_user",),
    "model": ("model",),
    "day": ("day",),
}
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


SUMS = {
    "requests": Sum("requests"),
    "prompt_tokens": Sum("prompt_tokens"),
    "completion_tokens": Sum("completion_tokens"),
    "cached_tokens": Sum("cached_tokens"),
    "cost": Sum("cost"),
}


def _filtered(query: AuditQuery) -> QuerySet[UsageRollup]:
    start = datetime.combine(query.since, time.min, tzinfo=UTC)
    end = datetime.combine(query.until + timedelta(days=1), time.min, tzinfo=UTC)
    rollups = UsageRollup.objects.filter(hour__gte=start, hour__lt=end)
    rollups = of_organizations(rollups, query.organization_id, query.organizations)
    return rollups


def _rows(query: AuditQuery) -> QuerySet[UsageRollup, Any]:
    columns = [column for dimension in query.group for column in GROUP_COLUMNS[dimension]]
    grouped = (
        _filtered(query)
        .annotate(day=TruncDate("hour", tzinfo=UTC))
        .values(*columns)
        .annotate(**SUMS)
        .annotate(
            cache_hit_ratio=Cast(F("cached_tokens"), FloatField())
            / NullIf(Cast(F("prompt_tokens"), FloatField()), Value(0.0))
        )
    )
    name = query.sort.lstrip("-")
    if name in AUDIT_DIMENSIONS and name not in query.group:
        name, descending = "cost", True
    else:
        descending = query.sort.startswith("-")
    column = F(SORT_COLUMN.get(name, name))
    tie_breaks = [SORT_COLUMN[d] for d in query.group]
    ordered: QuerySet[UsageRollup, Any] = grouped.order_by(
        column.desc(nulls_last=True) if descending else column.asc(nulls_last=True), *tie_breaks
    )
    return ordered


def audit_rows(
    query: AuditQuery, *, limit: int | None = None, offset: int = 0
) -> list[dict[str, Any]]:
    """The grouped rows, sorted, with each key's label; `limit` of them from `offset`."""
    rows = _rows(query)
    found = list(rows[offset:] if limit is None else rows[offset : offset + limit])
    if "key" in query.group:
        labels = key_labels({row["api_key_id"] for row in found})
        for row in found:
            row["key_label"] = labels.get(row["api_key_id"], "(no key)")
    return found


def audit_page(query: AuditQuery, *, number: int) -> AuditPage:
    """Page `number` (from 1) of the rows; a page past the last is the last. The rows are
    groups of the rollups of at most a few days, so counting them is a small query."""
    total = _rows(query).count()
    pages = max(1, -(-total // PAGE_SIZE))
    number = min(max(number, 1), pages)
    rows = audit_rows(query, limit=PAGE_SIZE, offset=(number - 1) * PAGE_SIZE)
    return AuditPage(rows=rows, number=number, pages=pages, total_rows=total)


def audit_totals(query: AuditQuery) -> dict[str, Any]:
    totals = _filtered(query).aggregate(**SUMS)
    prompt, cached = totals["prompt_tokens"], totals["cached_tokens"]
    totals["cache_hit_ratio"] = cached / prompt if prompt else None
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
