"""Usage breakdowns (telemetry/services/breakdowns.py) against the runs they sum: each grain, by
hour and by day, after refreshes that land mid-hour, and the Spend page's long ranges read from
them — partial first and last days included — agreeing with the runs and with the Overview."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.cache import cache

from accounts.models import Organization
from accounts.services import key_create
from dashboard.selectors.overview import OverviewFilters, overview
from dashboard.selectors.spend import (
    CHART_SERIES,
    SpendFilters,
    spend_chart,
    spend_totals,
    spend_totals_and_charts,
    usage_by,
    usage_by_each,
)
from dashboard.selectors.spend.charts import _costs_per_bucket, _moment
from gateway.models import CatalogModel, Deployment
from telemetry.models import Run, UsageBreakdown
from telemetry.services.breakdowns import BREAKDOWN_GRAINS, usage_breakdowns_backfill
from telemetry.services.rollups import (
    IN_PROCESS_KEY,
    IS_ERROR,
    WATERMARK_KEY,
    usage_rollups_keep_fresh,
    usage_rollups_refresh,
)
from tests.support.runs import finished_run

pytestmark = pytest.mark.django_db

# Four days of runs, the first and last partial; "now" is in the last one.
DAY0 = datetime(2031, 3, 9, tzinfo=UTC)
NOW = DAY0 + timedelta(days=3, hours=14, minutes=20)


def make_run(organization: Organization, accepted: datetime, **fields: object) -> Run:
    return finished_run(organization, accepted, latency_ms=700, ttft_ms=70, **fields)


@pytest.fixture
def traffic() -> dict[str, Organization]:
    """Runs every five hours over four days: two organizations, keys, end users (one shared
    by both organizations), two models on two deployments, errors, cached tokens."""
    cache.delete(WATERMARK_KEY)
    deployment = Deployment.objects.create(name="dep-breakdown")
    CatalogModel.objects.create(
        id="breakdown-a",
        deployment=deployment,
        price_input=Decimal("2"),
        price_cached_input=Decimal("0.5"),
        price_output=Decimal("8"),
    )
    acme = Organization.objects.create(name="breakdown-acme")
    other = Organization.objects.create(name="breakdown-other")
    keys = [key_create(organization=acme, name=n).key for n in ("ci", "bot")]
    users = ["ann", "ben", "cid"]
    moment = DAY0 + timedelta(hours=3, minutes=7)
    i = 0
    while moment < NOW:
        org = other if i % 4 == 3 else acme
        make_run(
            org,
            moment,
            api_key=keys[i % 2] if org == acme else None,
            end_user=users[i % 3],
            model=("breakdown-a", "breakdown-b")[i % 5 % 2],
            deployment=("dep-a", "dep-b")[i % 5 % 2],
            cached_tokens=(i % 3) * 1_000,
            cost=Decimal(i % 7) / 100,
            **(
                {"status": Run.Status.FAILED, "http_status": 502, "error_code": "upstream_error"}
                if i % 6 == 5
                else {}
            ),
        )
        moment += timedelta(hours=5, minutes=i % 40)
        i += 1
    return {"acme": acme, "other": other}


def sums_of(rows: object, columns: tuple[str, ...]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Requests, errors, tokens and cost per value of `columns` (runs or breakdowns alike)."""
    found: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0, 0, 0, 0, 0, Decimal(0)])
    for row in rows:  # type: ignore[attr-defined]
        key = tuple(getattr(row, c) for c in columns)
        sums = found[key]
        sums[0] += getattr(row, "requests", 1)
        sums[1] += row.errors if isinstance(row, UsageBreakdown) else int(row.is_error)
        sums[2] += row.prompt_tokens or 0
        sums[3] += row.completion_tokens or 0
        sums[4] += row.cached_tokens or 0
        sums[5] += row.cost or 0
    return {key: tuple(sums) for key, sums in found.items()}


def runs_with_error_flag(**where: object) -> list[Run]:
    errors = set(Run.objects.filter(IS_ERROR).values_list("pk", flat=True))
    # This test's runs only: browser tests elsewhere commit runs of their own.
    runs = list(
        Run.objects.exclude(status=Run.Status.IN_PROGRESS).filter(
            organization__name__startswith="breakdown-", **where
        )
    )
    for run in runs:
        run.is_error = run.pk in errors  # type: ignore[attr-defined]
        run.api_key_id = run.api_key_id or 0
    return runs


BREAKDOWN_COLUMNS = (
    "span",
    "grain",
    "start",
    "organization_id",
    "api_key_id",
    "end_user",
    "model",
    "deployment",
    "requests",
    "errors",
    "cached_tokens",
    "cost",
)


def run_columns(grain: str) -> tuple[str, ...]:
    return tuple(c for c in BREAKDOWN_GRAINS[grain])


@pytest.mark.parametrize("grain", sorted(BREAKDOWN_GRAINS))
def test_each_day_s_breakdowns_sum_to_its_runs(
    traffic: dict[str, Organization], grain: str
) -> None:
    usage_rollups_refresh(since=DAY0, until=NOW)
    # The running day (NOW's) is not broken down by the day until it is over.
    assert not UsageBreakdown.objects.filter(span="day", start=DAY0 + timedelta(days=3)).exists()
    for day in range(3):
        start = DAY0 + timedelta(days=day)
        runs = runs_with_error_flag(
            accepted_at__gte=start, accepted_at__lt=start + timedelta(days=1)
        )
        breakdowns = UsageBreakdown.objects.filter(span="day", grain=grain, start=start)
        assert runs, "each day has runs"
        assert sums_of(breakdowns, run_columns(grain)) == sums_of(runs, run_columns(grain))
    # The sum over every organization: `end_user_all` rows say organization 0.
    if grain == "end_user_all":
        assert set(
            UsageBreakdown.objects.filter(grain=grain).values_list("organization_id", flat=True)
        ) == {0}


@pytest.mark.parametrize("grain", ["model", "key", "deployment"])
def test_each_hour_s_breakdowns_sum_to_its_runs(
    traffic: dict[str, Organization], grain: str
) -> None:
    usage_rollups_refresh(since=DAY0, until=NOW)
    hours = sorted(
        {
            run.accepted_at.replace(minute=0, second=0, microsecond=0)
            for run in runs_with_error_flag()
        }
    )
    assert len(hours) > 10
    for hour in hours:
        runs = runs_with_error_flag(
            accepted_at__gte=hour, accepted_at__lt=hour + timedelta(hours=1)
        )
        breakdowns = UsageBreakdown.objects.filter(span="hour", grain=grain, start=hour)
        assert sums_of(breakdowns, run_columns(grain)) == sums_of(runs, run_columns(grain))


def test_a_refresh_mid_hour_then_another_counts_each_run_once(
    traffic: dict[str, Organization],
) -> None:
    acme = traffic["acme"]
    hour = DAY0 + timedelta(days=3, hours=15)
    usage_rollups_refresh(since=DAY0, until=hour)
    make_run(
        acme, hour + timedelta(minutes=5), end_user="dee", model="breakdown-a", cost=Decimal("1")
    )
    streaming = make_run(
        acme,
        hour + timedelta(minutes=9),
        end_user="dee",
        status=Run.Status.IN_PROGRESS,
        finished_at=None,
        cost=None,
    )
    usage_rollups_refresh(since=hour, until=hour + timedelta(minutes=20))  # lands mid-hour

    def dee(span: str, start: datetime) -> tuple[int, Decimal]:
        # A recompute replaces the rows (new ids): looked up anew each time.
        grain = "model" if span == "hour" else "end_user"
        rows = UsageBreakdown.objects.filter(span=span, grain=grain, start=start)
        rows = rows.filter(
            organization_id=acme.pk, **({"end_user": "dee"} if span == "day" else {})
        )
        return sum(r.requests for r in rows), sum((r.cost for r in rows), Decimal(0))

    day = hour.replace(hour=0)
    before = dee("hour", hour - timedelta(hours=1))
    assert dee("hour", hour) == (1, Decimal("1"))  # the run in progress not yet
    make_run(
        acme, hour + timedelta(minutes=30), end_user="dee", model="breakdown-a", cost=Decimal("2")
    )
    Run.objects.filter(pk=streaming.pk).update(
        status=Run.Status.COMPLETED, finished_at=hour + timedelta(minutes=41), cost=Decimal("4")
    )
    usage_rollups_refresh(since=hour + timedelta(minutes=20), until=hour + timedelta(minutes=45))
    assert dee("hour", hour) == (3, Decimal("7"))
    assert dee("hour", hour - timedelta(hours=1)) == before  # not counted twice
    # The running day is read by the hour; its day breakdowns come once it is over — here by a
    # refresh past midnight in which no run was accepted or finished (a quiet night).
    assert dee("day", day) == (0, Decimal(0))
    midnight = day + timedelta(days=1)
    usage_rollups_refresh(since=hour + timedelta(minutes=45), until=midnight + timedelta(minutes=5))
    assert dee("day", day) == (3, Decimal("7"))
    runs = runs_with_error_flag(accepted_at__gte=day, accepted_at__lt=midnight)
    for grain in BREAKDOWN_GRAINS:
        breakdowns = UsageBreakdown.objects.filter(span="day", grain=grain, start=day)
        assert sums_of(breakdowns, run_columns(grain)) == sums_of(runs, run_columns(grain)), grain


def test_backfill_breaks_down_rollups_made_before_breakdowns(
    traffic: dict[str, Organization],
) -> None:
    usage_rollups_refresh(since=DAY0, until=NOW)

    def ours() -> list[tuple[Any, ...]]:
        # This test's days only: browser tests elsewhere commit rollups of their own.
        return sorted(
            UsageBreakdown.objects.filter(start__gte=DAY0).values_list(*BREAKDOWN_COLUMNS)
        )

    expected = ours()
    assert len(expected) > 50
    UsageBreakdown.objects.all().delete()
    assert usage_breakdowns_backfill(until=NOW) >= len(expected)
    assert ours() == expected


@pytest.mark.parametrize("organization", ["acme", None])
def test_a_long_range_reads_day_breakdowns_and_agrees_with_the_runs_and_the_overview(
    traffic: dict[str, Organization], organization: str | None
) -> None:
    usage_rollups_refresh(since=DAY0, until=NOW)
    # The watermark an hour ago: runs after it are read from the runs themselves.
    cache.set(WATERMARK_KEY, NOW - timedelta(hours=1), timeout=None)
    org = traffic[organization] if organization else None
    # Starts mid-day (the first day partial), ends today (the last day partial).
    since = DAY0 + timedelta(hours=5, minutes=40)
    filters = SpendFilters(
        since=since, until=NOW, organization_id=org.pk if org else None, bucket="day"
    )
    where: dict[str, object] = {"accepted_at__gte": since.replace(minute=0), "accepted_at__lt": NOW}
    if org:
        where["organization"] = org
    runs = runs_with_error_flag(**where)
    total = sums_of(runs, ())[()]

    totals = spend_totals(filters, now=NOW)
    assert (totals.requests, totals.errors, totals.cost, totals.cached_tokens) == (
        total[0],
        total[1],
        total[5],
        total[4],
    )
    cached_a = sum((r.cached_tokens or 0) for r in runs if r.model == "breakdown-a")
    assert totals.savings == Decimal(cached_a) * Decimal("1.5") / 1_000_000
    seen = overview(
        OverviewFilters(since=since, until=NOW, organization_id=filters.organization_id), now=NOW
    )
    assert (seen.totals["requests"], seen.totals["cost"]) == (totals.requests, totals.cost)

    for dimension, column in (
        ("key", "api_key_id"),
        ("end_user", "end_user"),
        ("model", "model"),
        ("deployment", "deployment"),
        ("organization", "organization_id"),
    ):
        expected = sums_of(runs, (column,))
        found = usage_by(filters, dimension, limit=None, now=NOW)
        assert {u.value: (u.requests, u.errors, u.cost) for u in found} == {
            key[0]: (s[0], s[1], s[5]) for key, s in expected.items()
        }, dimension
        for usage in found:
            cached = sum(
                (r.cached_tokens or 0)
                for r in runs
                if getattr(r, column) == usage.value and r.model == "breakdown-a"
            )
            assert usage.savings == Decimal(cached) * Decimal("1.5") / 1_000_000, (
                dimension,
                usage.value,
            )

    days = [(DAY0 + timedelta(days=d)).date() for d in range(4)]

    def cost_per_day(column: str, value: object, *, equal: bool) -> list[float]:
        return [
            float(
                sum(
                    (
                        r.cost or Decimal(0)
                        for r in runs
                        if r.accepted_at.date() == day and (getattr(r, column) == value) == equal
                    ),
                    Decimal(0),
                )
            )
            for day in days
        ]

    # The first value a line of its own, the rest as "other" (the total less the lines).
    for dimension, column in (("end_user", "end_user"), ("key", "api_key_id"), ("model", "model")):
        top = usage_by(filters, dimension, limit=1, now=NOW)
        chart = spend_chart(filters, dimension, top, now=NOW)
        assert len(chart.buckets) == 4  # four days, the first and last partial
        assert chart.series == [
            (top[0].label, cost_per_day(column, top[0].value, equal=True)),
            ("other", cost_per_day(column, top[0].value, equal=False)),
        ], dimension


@pytest.mark.parametrize("organization", ["acme", None])
@pytest.mark.parametrize("bucket", ["day", "hour"])
def test_the_page_s_sums_and_charts_read_together_are_those_read_apart(
    traffic: dict[str, Organization], organization: str | None, bucket: str
) -> None:
    """The page reads its sums, total per bucket and model chart in one query: the same
    figures as `spend_totals` and each `spend_chart`, runs since the refresh included."""
    usage_rollups_refresh(since=DAY0, until=NOW)
    cache.set(WATERMARK_KEY, NOW - timedelta(hours=1), timeout=None)
    # Several models, so the model chart has lines of its own and "other".
    CatalogModel.objects.create(
        id="breakdown-b",
        deployment=Deployment.objects.get(name="dep-breakdown"),
        price_input=Decimal("3"),
        price_cached_input=Decimal("1"),
        price_output=Decimal("9"),
    )
    org = traffic[organization] if organization else None
    span = timedelta(days=2, hours=7) if bucket == "day" else timedelta(hours=20)
    filters = SpendFilters(
        since=NOW - span, until=NOW, organization_id=org.pk if org else None, bucket=bucket
    )
    tops = {
        dimension: usage_by(filters, dimension, limit=CHART_SERIES, now=NOW)
        for dimension in ("organization", "key", "end_user", "model")
    }
    tops["model"] = tops["model"][:1]
    totals, charts = spend_totals_and_charts(filters, tops, now=NOW)
    assert totals == spend_totals(filters, now=NOW)
    assert totals.requests and totals.savings
    # Each chart's lines and "other" add up to the total per bucket, which sums to the range's.
    for dimension in tops:
        per_bucket = [
            sum(values) for values in zip(*(v for _, v in charts[dimension].series), strict=True)
        ]
        assert sum(per_bucket) == pytest.approx(float(totals.cost)), dimension
    # The model chart's line from the shared query, as the model's own rows give it.
    top_model = tops["model"][0]
    own = _costs_per_bucket(filters, "model", only=("model", [top_model.value]), now=NOW)
    line = [0.0] * len(charts["model"].buckets)
    for moment, _, cost in own:
        line[charts["model"].buckets.index(int(_moment(moment).timestamp()))] += float(cost)
    assert charts["model"].series[0] == (top_model.label, line)


@pytest.mark.parametrize("organization", ["acme", None])
@pytest.mark.parametrize("limit", [2, None])
def test_the_page_s_breakdowns_read_together_are_those_read_apart(
    traffic: dict[str, Organization], organization: str | None, limit: int | None
) -> None:
    """The page reads its five breakdowns in one query, the runs since the refresh grouped
    once for all: the same rows, in the same order, as each breakdown read alone."""
    usage_rollups_refresh(since=DAY0, until=NOW)
    cache.set(WATERMARK_KEY, NOW - timedelta(hours=1), timeout=None)
    make_run(traffic["acme"], NOW - timedelta(minutes=30), end_user="eve", cost=Decimal("9"))
    org = traffic[organization] if organization else None
    filters = SpendFilters(
        since=DAY0 + timedelta(hours=5, minutes=40),
        until=NOW,
        organization_id=org.pk if org else None,
        bucket="day",
    )
    sorts = {
        "organization": "cost",
        "key": "requests",
        "end_user": "cost",
        "model": "cost",
        "deployment": "errors",
    }
    together = usage_by_each(filters, sorts, limit=limit, now=NOW)
    for dimension, sort in sorts.items():
        alone = usage_by(filters, dimension, limit=limit, sort=sort, now=NOW)
        assert together[dimension] == alone, dimension
        assert alone
    assert together["end_user"][0].value == "eve"  # a run since the refresh counts


def test_the_in_process_refresh_breaks_down_each_day_once_it_is_over(
    traffic: dict[str, Organization],
) -> None:
    """The embedded default's path (no beat): the pages' own catch-up."""
    cache.delete(IN_PROCESS_KEY)
    usage_rollups_keep_fresh(now=NOW)  # the process's first: looks back `MAX_CATCH_UP`
    broken_down = set(UsageBreakdown.objects.filter(span="day").values_list("start", flat=True))
    assert broken_down == {DAY0 + timedelta(days=d) for d in range(3)}
    cache.delete(IN_PROCESS_KEY)
    usage_rollups_keep_fresh(now=DAY0 + timedelta(days=4, minutes=3))  # past midnight
    last = DAY0 + timedelta(days=3)
    runs = runs_with_error_flag(accepted_at__gte=last, accepted_at__lt=last + timedelta(days=1))
    assert runs
    for grain in BREAKDOWN_GRAINS:
        breakdowns = UsageBreakdown.objects.filter(span="day", grain=grain, start=last)
        assert sums_of(breakdowns, run_columns(grain)) == sums_of(runs, run_columns(grain)), grain
