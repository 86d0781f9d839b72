"""Sessions: a range's runs grouped by organization and session, with replica stickiness and
cache hits.

Stickiness is the share of routed runs that went to the session's own replica
(`session_kept`); runs of scripted deployments are not routed to replicas and do not count.
The cache-hit ratio is cached prompt tokens over prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import (
    Count,
    DecimalField,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Min,
    Q,
    Sum,
    Value,
)
from django.db.models.functions import Cast, Coalesce, NullIf

from dashboard.selectors.scope import of_organizations
from telemetry.models import Run

SESSION_LIMIT = 200
SESSION_SORTS = {
    "-last_seen": "-last_seen",
    "last_seen": "last_seen",
    "-runs": "-runs",
    "runs": "runs",
    "-stickiness": "-stickiness",
    "stickiness": "stickiness",
    "-cache_hit_ratio": "-cache_hit_ratio",
    "cache_hit_ratio": "cache_hit_ratio",
    "-cost": "-cost",
    "cost": "cost",
}


@dataclass(frozen=True)
class SessionQuery:
    since: datetime
    organization_id: int | None = None
    organizations: frozenset[int] | None = None  # those the user sees; None: every one
    sort: str = "-last_seen"


def _share(part: Any, whole: Any) -> ExpressionWrapper[Any]:
    return ExpressionWrapper(
        Cast(part, FloatField()) / NullIf(Cast(whole, FloatField()), Value(0.0)),
        output_field=FloatField(),
    )


def session_summaries(query: SessionQuery, *, limit: int = SESSION_LIMIT) -> list[dict[str, Any]]:
    """Up to `limit` sessions with runs since `query.since`, sorted as asked."""
    runs = Run.objects.filter(accepted_at__gte=query.since).exclude(session="")
    runs = of_organizations(runs, query.organization_id, query.organizations)
    order = SESSION_SORTS.get(query.sort, "-last_seen")
    descending = order.startswith("-")
    sessions = (
        runs.values("organization_id", "organization__name", "session")
        .annotate(
            runs=Count("pk"),
            routed=Count("pk", filter=Q(session_kept__isnull=False)),
            kept=Count("pk", filter=Q(session_kept=True)),
            replicas=Count("replica", distinct=True, filter=~Q(replica="")),
            prompt_tokens=Coalesce(Sum("prompt_tokens"), 0),
            cached_tokens=Coalesce(Sum("cached_tokens"), 0),
            cost=Coalesce(
                Sum("cost"), Value(0), output_field=DecimalField(max_digits=20, decimal_places=9)
            ),
            first_seen=Min("accepted_at"),
            last_seen=Max("accepted_at"),
            end_users=Count("end_user", distinct=True, filter=~Q(end_user="")),
        )
        .annotate(
            stickiness=_share(F("kept"), F("routed")),
            cache_hit_ratio=_share(F("cached_tokens"), F("prompt_tokens")),
        )
        .order_by(
            F(order.lstrip("-")).desc(nulls_last=True)
            if descending
            else F(order).asc(nulls_last=True),
            "session",
        )
    )
    return [dict(row) for row in sessions[:limit]]
