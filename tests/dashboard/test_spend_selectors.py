"""The Spend page's figures against runs made for the test: breakdowns by organization, key,
end user, model and deployment (from the rollups and from fresh runs alike), spend over time,
cache savings in money, errors by code, and the latency and TTFT histograms."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache

from accounts.models import Organization
from accounts.services import key_create
from dashboard.selectors.spend import (
    BIN_EDGES_MS,
    ErrorCount,
    SpendFilters,
    errors_by_code,
    histogram,
    spend_chart,
    spend_totals,
    usage_by,
)
from gateway.models import CatalogModel, Deployment
from telemetry.models import Run
from telemetry.services.rollups import WATERMARK_KEY, usage_rollups_refresh
from tests.support.runs import finished_run

pytestmark = pytest.mark.django_db

# Ten o'clock, and "now" three hours later: the hours before the watermark's come from the
# rollups, the rest from the runs.
T0 = datetime(2031, 6, 7, 10, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=3, minutes=30)


def make_run(organization: Organization, **fields: object) -> Run:
    latency = int(fields.pop("latency_ms", 500))  # type: ignore[call-overload]
    return finished_run(
        organization,
        fields.pop("accepted_at", T0),  # type: ignore[arg-type]
        latency_ms=latency,
        ttft_ms=latency // 10,
        **{"model": "spend-a", "deployment": "dep-a", **fields},
    )


@pytest.fixture
def world() -> dict[str, object]:
    cache.delete(WATERMARK_KEY)
    deployment = Deployment.objects.create(name="dep-spend")
    # $2 per million input tokens, $0.50 cached: each cached token saves $1.50 per million.
    CatalogModel.objects.create(
        id="spend-a",
        deployment=deployment,
        price_input=Decimal("2"),
        price_cached_input=Decimal("0.5"),
        price_output=Decimal("8"),
    )
    acme = Organization.objects.create(name="spend-acme")
    other = Organization.objects.create(name="spend-other")
    ci = key_create(organization=acme, name="ci").key
    bot = key_create(organization=acme, name="bot").key
    # Hour 10, summed into the rollups below.
    make_run(acme, api_key=ci, end_user="ann", cached_tokens=40_000, cost=Decimal("1.25"))
    make_run(acme, api_key=ci, end_user="ann", cost=Decimal("0.75"), latency_ms=1500)
    make_run(
        acme,
        api_key=bot,
        end_user="ben",
        model="spend-b",
        deployment="dep-b",
        cost=Decimal("0.5"),
        latency_ms=40,
    )
    make_run(
        acme,
        api_key=bot,
        end_user="ben",
        status=Run.Status.FAILED,
        http_status=502,
        error_code="upstream_error",
        deployment="dep-b",
        cost=None,
        prompt_tokens=None,
        completion_tokens=None,
        first_token_at=None,
    )
    make_run(other, end_user="cid", cost=Decimal("9"))
    usage_rollups_refresh(since=T0, until=T0 + timedelta(hours=1))
    cache.set(WATERMARK_KEY, T0 + timedelta(hours=2, minutes=5), timeout=None)
    # Hour 12 on: after the watermark's hour starts, so read from the runs (not rolled up).
    make_run(
        acme,
        api_key=ci,
        end_user="ann",
        accepted_at=T0 + timedelta(hours=2, minutes=10),
        cached_tokens=20_000,
        cost=Decimal("2"),
        latency_ms=12_000,
    )
    make_run(
        acme,
        api_key=bot,
        end_user="ben",
        accepted_at=T0 + timedelta(hours=3, minutes=1),
        status=Run.Status.REFUSED,
        http_status=402,
        error_code="insufficient_quota",
        cost=None,
        prompt_tokens=None,
        completion_tokens=None,
        first_token_at=None,
        finished_at=T0 + timedelta(hours=3, minutes=1),
    )
    make_run(acme, accepted_at=T0 + timedelta(hours=3, minutes=2), status=Run.Status.IN_PROGRESS)
    return {"acme": acme, "other": other, "ci": ci, "bot": bot}


def acme_filters(world: dict, **extra: object) -> SpendFilters:
    acme = world["acme"]
    assert isinstance(acme, Organization)
    fields: dict[str, object] = {"organization_id": acme.pk, **extra}
    return SpendFilters(since=T0 - timedelta(minutes=30), until=NOW, **fields)  # type: ignore[arg-type]


def test_totals_add_rollups_and_fresh_runs_with_cache_savings_in_money(world: dict) -> None:
    totals = spend_totals(acme_filters(world), now=NOW)
    # 4 rolled up + 2 fresh finished runs; the run in progress counts once it ends.
    assert totals.requests == 6
    assert totals.errors == 2
    assert totals.cost == Decimal("4.5")
    assert totals.cached_tokens == 60_000
    # 60,000 cached tokens of spend-a at $1.50 per million saved; spend-b has no price.
    assert totals.savings == Decimal("0.09")

    everyone = spend_totals(acme_filters(world, organization_id=None), now=NOW)
    assert (everyone.requests, everyone.cost) == (7, Decimal("13.5"))


def test_breakdowns_rank_by_spend_with_names(world: dict) -> None:
    filters = acme_filters(world)
    by_key = usage_by(filters, "key", now=NOW)
    assert [(u.label.split()[-1], u.requests, u.cost) for u in by_key] == [
        ("ci", 3, Decimal("4")),
        ("bot", 3, Decimal("0.5")),
    ]
    assert by_key[0].savings == Decimal("0.09")
    by_user = usage_by(filters, "end_user", now=NOW)
    assert [(u.label, u.requests, u.errors, u.cost) for u in by_user] == [
        ("ann", 3, 0, Decimal("4")),
        ("ben", 3, 2, Decimal("0.5")),
    ]
    by_model = usage_by(filters, "model", now=NOW)
    assert [(u.label, u.cost) for u in by_model] == [
        ("spend-a", Decimal("4")),
        ("spend-b", Decimal("0.5")),
    ]
    by_org = usage_by(acme_filters(world, organization_id=None), "organization", now=NOW)
    assert [(u.label, u.cost) for u in by_org] == [
        ("spend-other", Decimal("9")),
        ("spend-acme", Decimal("4.5")),
    ]
    assert [u.label for u in usage_by(filters, "end_user", limit=1, now=NOW)] == ["ann"]


def test_errors_by_deployment_and_by_code(world: dict) -> None:
    filters = acme_filters(world)
    deployments = usage_by(filters, "deployment", sort="errors", now=NOW)
    assert [(u.label, u.requests, u.errors) for u in deployments] == [
        ("dep-a", 4, 1),  # the refused run was sent to dep-a's model
        ("dep-b", 2, 1),
    ]
    assert deployments[1].error_ratio == 0.5
    assert errors_by_code(filters) == [
        ErrorCount("insufficient_quota", 1),
        ErrorCount("upstream_error", 1),
    ]
    assert errors_by_code(acme_filters(world, organization_id=None)) == errors_by_code(filters)


def test_the_chart_has_a_line_per_top_spender_and_one_for_the_rest(world: dict) -> None:
    filters = acme_filters(world)
    top = usage_by(filters, "end_user", limit=1, now=NOW)
    chart = spend_chart(filters, "end_user", top, now=NOW)
    hours = [int((T0 + timedelta(hours=h)).timestamp()) for h in range(-1, 4)]
    assert chart.buckets == hours  # 09:00 to 13:00
    assert chart.series == [("ann", [0, 2.0, 0, 2.0, 0]), ("other", [0, 0.5, 0, 0, 0])]

    daily = spend_chart(
        acme_filters(world, bucket="day"), "end_user", usage_by(filters, "end_user", now=NOW)
    )
    assert daily.buckets == [int(datetime(2031, 6, 7, tzinfo=UTC).timestamp())]
    assert daily.series == [("ann", [4.0]), ("ben", [0.5])]


def test_histograms_count_completed_runs_per_bin(world: dict) -> None:
    filters = acme_filters(world)
    latency = histogram(filters, "latency")
    assert len(latency) == len(BIN_EDGES_MS) + 1
    counts = {b.upper_ms: b.runs for b in latency if b.runs}
    # 500, 1500, 40 ms in hour 10, and 12 s in hour 12.
    assert counts == {50: 1, 1_000: 1, 2_000: 1, 30_000: 1}  # by the bins' upper bounds
    assert [b.label for b in latency[:2]] == ["0 ms\N{EN DASH}50 ms", "50 ms\N{EN DASH}100 ms"]
    assert latency[-1].label == "\N{GREATER-THAN OR EQUAL TO} 60 s"
    ttft = {b.upper_ms: b.runs for b in histogram(filters, "ttft") if b.runs}
    # A tenth of each: 4, 50 (a bin's lower edge is in it), 150 ms and 1.2 s.
    assert ttft == {50: 1, 100: 1, 200: 1, 2_000: 1}
    assert sum(b.runs for b in histogram(filters, "latency", limit=2)) == 2
