"""The runs list's end-user choices (`end_user_names`): the rollups' end users, and those of
the runs from the hour of the rollups' last refresh on, so an end user is offered from their
first run; in order of their names, cut at the limit, of the organizations the user sees."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache

from accounts.models import Organization
from dashboard.selectors.catalog import end_user_names
from telemetry.services.rollups import WATERMARK_KEY, usage_rollups_refresh
from tests.support.runs import finished_run

pytestmark = pytest.mark.django_db

NOW = datetime(2031, 7, 3, 14, 20, tzinfo=UTC)
WATERMARK = NOW - timedelta(minutes=15)  # the last refresh: its hour on is read from runs
PREFIX = "choice-"


@pytest.fixture
def orgs() -> Iterator[dict[str, Organization]]:
    """Two organizations' end users: rolled up three days ago, and new since the refresh."""
    acme = Organization.objects.create(name="choice-acme")
    other = Organization.objects.create(name="choice-other")
    old = NOW - timedelta(days=3)
    for org, name in ((acme, "carol"), (acme, "ann"), (other, "olga"), (acme, "both")):
        finished_run(org, old, end_user=PREFIX + name)
    usage_rollups_refresh(since=old - timedelta(hours=1), until=WATERMARK)
    cache.set(WATERMARK_KEY, WATERMARK, timeout=None)
    # After the refresh: an end user's first run, a rolled-up one's again, and one of the
    # hours the rollups hold that the next refresh will count.
    finished_run(acme, NOW - timedelta(minutes=10), end_user=PREFIX + "bea")
    finished_run(acme, NOW - timedelta(minutes=5), end_user=PREFIX + "both")
    finished_run(other, NOW - timedelta(minutes=3), end_user=PREFIX + "oscar")
    finished_run(acme, old, end_user=PREFIX + "late")
    yield {"acme": acme, "other": other}
    cache.delete(WATERMARK_KEY)


def ours(names: list[str]) -> list[str]:
    """This test's names (other tests' committed runs may be stored too), prefix dropped."""
    return [name.removeprefix(PREFIX) for name in names if name.startswith(PREFIX)]


def test_the_choices_are_the_rollups_end_users_and_those_of_runs_since_their_refresh(
    orgs: dict[str, Organization],
) -> None:
    names = end_user_names(now=NOW)
    assert ours(names) == ["ann", "bea", "both", "carol", "olga", "oscar"]
    assert names == sorted(names) and "" not in names


def test_a_run_of_an_hour_before_the_refresh_s_is_offered_once_rolled_up(
    orgs: dict[str, Organization],
) -> None:
    assert "late" not in ours(end_user_names(now=NOW))
    usage_rollups_refresh(since=NOW - timedelta(days=3, hours=1), until=NOW)
    assert "late" in ours(end_user_names(now=NOW))


def test_the_choices_are_of_the_organizations_seen(orgs: dict[str, Organization]) -> None:
    acme, other = orgs["acme"].pk, orgs["other"].pk
    assert ours(end_user_names(organizations=frozenset({acme}), now=NOW)) == [
        "ann",
        "bea",
        "both",
        "carol",
    ]
    assert ours(end_user_names(organizations=frozenset({other}), now=NOW)) == ["olga", "oscar"]
    assert end_user_names(organizations=frozenset(), now=NOW) == []


def test_the_limit_cuts_both_sources_together_in_order(orgs: dict[str, Organization]) -> None:
    seen = frozenset({orgs["acme"].pk})
    assert ours(end_user_names(limit=2, organizations=seen, now=NOW)) == ["ann", "bea"]
    assert ours(end_user_names(limit=3, organizations=seen, now=NOW)) == ["ann", "bea", "both"]
