"""The Cost & cache audit and Spend read the same numbers at the same moment: both sum the
rollups before the hour of their last refresh and the runs from then on, so a run stored a
second ago is in both, and a run both rolled up and fresh is counted once."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache

from accounts.models import Organization
from dashboard.selectors.audit import AuditQuery, audit_rows, audit_totals
from dashboard.selectors.spend import SpendFilters, spend_totals, usage_by
from telemetry.models import UsageRollup
from telemetry.services.rollups import WATERMARK_KEY, usage_rollups_refresh
from tests.support.runs import finished_run

pytestmark = pytest.mark.django_db

NOW = datetime(2031, 8, 9, 14, 30, tzinfo=UTC)
YESTERDAY = datetime(2031, 8, 8, tzinfo=UTC)


@pytest.fixture
def org() -> Organization:
    return Organization.objects.create(name="agree-org")


def test_a_run_stored_after_the_last_rollup_is_in_the_audit_as_in_spend(
    org: Organization,
) -> None:
    def run(at: datetime, end_user: str, cost: str) -> None:
        finished_run(org, at, end_user=end_user, model="m-a", cost=Decimal(cost))

    run(YESTERDAY + timedelta(hours=10), "alice", "0.001")
    run(NOW.replace(hour=12, minute=10), "bob", "0.002")
    run(NOW.replace(minute=2), "alice", "0.001")
    usage_rollups_refresh(since=YESTERDAY, until=NOW)
    assert UsageRollup.objects.filter(organization=org).count() == 3
    cache.set(WATERMARK_KEY, NOW.replace(minute=5), timeout=None)  # the last refresh
    run(NOW.replace(minute=20), "carol", "0.004")  # after it: in no rollup yet

    query = AuditQuery(since=YESTERDAY.date(), until=NOW.date(), organization_id=org.pk)
    filters = SpendFilters(since=YESTERDAY, until=NOW, organization_id=org.pk)
    audit = audit_totals(query, now=NOW)
    spend = spend_totals(filters, now=NOW)

    assert (audit["requests"], audit["cost"], audit["prompt_tokens"]) == (
        4,
        Decimal("0.008"),
        400,
    )
    assert (spend.requests, spend.cost, spend.prompt_tokens) == (
        audit["requests"],
        audit["cost"],
        audit["prompt_tokens"],
    )

    by_user = audit_rows(
        AuditQuery(**{**query.__dict__, "group": ("end_user",), "sort": "end_user"}), now=NOW
    )
    assert [(r["end_user"], r["requests"], r["cost"]) for r in by_user] == [
        ("alice", 2, Decimal("0.002")),
        ("bob", 1, Decimal("0.002")),
        ("carol", 1, Decimal("0.004")),
    ]
    spend_by_user = {u.value: (u.requests, u.cost) for u in usage_by(filters, "end_user", now=NOW)}
    assert spend_by_user == {r["end_user"]: (r["requests"], r["cost"]) for r in by_user}

    by_day = audit_rows(AuditQuery(**{**query.__dict__, "group": ("day",), "sort": "day"}), now=NOW)
    assert [(r["day"], r["requests"]) for r in by_day] == [
        (date(2031, 8, 8), 1),
        (date(2031, 8, 9), 3),
    ]
