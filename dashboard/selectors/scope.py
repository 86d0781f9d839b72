"""Rows of the organizations a dashboard user sees (`dashboard.access`)."""

from __future__ import annotations

from typing import Any, TypeVar

from django.db.models import Model, QuerySet

M = TypeVar("M", bound=Model)


def of_organizations(
    rows: QuerySet[M, Any], organization_id: int | None, organizations: frozenset[int] | None
) -> QuerySet[M, Any]:
    """`rows` of the organization chosen, if one is, and of those seen (None: every one).

    Both apply: a chosen organization outside those seen leaves no rows."""
    if organization_id is not None:
        rows = rows.filter(organization_id=organization_id)
    if organizations is not None:
        rows = rows.filter(organization_id__in=organizations)
    return rows
