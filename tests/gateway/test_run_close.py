"""A run's money comes from its one close, whichever way the run ends.

Each test sends a request through the whole pipeline in-process (`gateway.inprocess`), on the
scripted model or a mock model server process, and ends it one way: completed, cut at its
length, stopped, its client gone, its model server failing before and after the first byte,
refused by its budget or a rate limit, answered as a dedupe follower. Then it checks that the
run was closed once, and that its cost, its hold's charge and the tokens counted against its
rate limits are that close's: the stored run carries the close's cost and charge, the budget's
ledger moved by exactly the charge, and the limiter was counted exactly the close's tokens.
The close is watched, not replaced: the spies below call through to the real code.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
import pytest
from django.db import connection
from django.http import HttpResponse

from accounts.models import ApiKey, Organization
from accounts.services import key_create
from billing.costs import to_micro
from billing.models import BudgetHold, BudgetSpend
from billing.services.holds import LEDGER_THREADS, settlements_drained
from core.backplane import backplane
from core.http.responses import EventStreamResponse
from core.ratelimits import Bucket
from gateway.coordination.stop import live_generations
from gateway.inprocess import send_for_key
from gateway.models import CatalogModel, Deployment
from gateway.runs.run import Closed, RunInFlight
from gateway.surfaces.chat import SURFACE as CHAT
from gateway.upstream.client import close_clients
from telemetry.models import Run
from telemetry.store.running import close_run_writer
from tests.support.servers import ServerProcess, start_mock_model

pytestmark = [pytest.mark.django_db]

# Per million tokens: a prompt of ~20 tokens costs ~$0.000002, each output token $0.0000002.
PRICE_INPUT, PRICE_OUTPUT = Decimal(100), Decimal(200)
TOKENS_PER_MINUTE = 100_000
COUNTED_PER_MINUTE = 6_000
QUESTION = "What does max_tokens limit?"
_names = itertools.count(1)


@dataclass(frozen=True)
class Setting:
    key: ApiKey  # $10 of budget, a tokens-per-minute limit
    poor_key: ApiKey  # a budget that cannot pay one token
    limited_key: ApiKey  # one request a minute
    counted_key: ApiKey  # 6,000 tokens a minute: a token is 10 ms of its bucket


@pytest.fixture(scope="module")
def mock_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_mock_model(log_dir=tmp_path_factory.mktemp("close-mock"))
    yield server
    server.stop()


def _key(organization: Organization, **fields: Any) -> ApiKey:
    issued = key_create(organization=organization, name=f"close-{next(_names)}")
    ApiKey.objects.filter(id=issued.key.id).update(**fields)
    return ApiKey.objects.select_related("organization").get(id=issued.key.id)


@pytest.fixture(scope="module")
def setting(
    django_db_setup: None, django_db_blocker: Any, sees_other_connections: None, mock_model
) -> Setting:
    """The models and keys, committed: the pipeline reads them on threads of its own."""
    with django_db_blocker.unblock():
        slow, _ = Deployment.objects.update_or_create(
            name="close-slow", defaults={"scripted_delay_ms": 60}
        )
        upstream, _ = Deployment.objects.update_or_create(
            name="close-upstream",
            defaults={
                "kind": Deployment.Kind.UPSTREAM,
                "upstreams": [f"{mock_model.base_url}/v1"],
                "first_byte_timeout_s": 5,
                "chunk_timeout_s": 5,
                "total_timeout_s": 20,
            },
        )
        prices = {"price_input": PRICE_INPUT, "price_output": PRICE_OUTPUT}
        for model_id, deployment in (
            ("close-scripted", Deployment.objects.get(name="scripted")),
            ("close-slow", slow),
            ("close-upstream", upstream),
        ):
            CatalogModel.objects.update_or_create(
                id=model_id,
                defaults={"deployment": deployment, "context_window": 4096, **prices},
            )
        organization = Organization.objects.create(name=f"close-{uuid.uuid4().hex[:8]}")
        return Setting(
            key=_key(
                organization,
                budget_usd=Decimal(10),
                budget_period="total",
                tokens_per_minute=TOKENS_PER_MINUTE,
            ),
            poor_key=_key(organization, budget_usd=Decimal("0.000001"), budget_period="total"),
            limited_key=_key(organization, requests_per_minute=1),
            counted_key=_key(organization, tokens_per_minute=COUNTED_PER_MINUTE),
        )


@pytest.fixture(scope="module", autouse=True)
def connections_closed() -> Iterator[None]:
    """The pipeline's threads keep their connections (the ledger's, the reads'): closed after
    the module, so the test database can be dropped at the end of the run."""
    yield
    LEDGER_THREADS.submit(lambda: connection.close()).result()
    gc.collect()


@pytest.fixture(autouse=True)
async def model_server_clients_closed() -> AsyncIterator[None]:
    """The pooled clients of this test's event loop, closed with it."""
    yield
    await close_clients()


@dataclass
class Watched:
    """Every close of a run, by run id, and every count the limiter was sent, by bucket."""

    closes: dict[str, list[Closed]]
    counted: dict[str, list[int]]


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Watched:
    seen = Watched(defaultdict(list), defaultdict(list))
    close = RunInFlight._close

    def watched_close(run: RunInFlight, outcome: Any) -> None:
        close(run, outcome)
        assert run.closed is not None
        seen.closes[run.run_id].append(run.closed)

    monkeypatch.setattr(RunInFlight, "_close", watched_close)
    return seen


def watch_the_limiter(monkeypatch: pytest.MonkeyPatch, seen: Watched) -> None:
    """This event loop's limiter, its counts noted before they are sent on."""
    plane = backplane()
    count = plane.rate_count

    def watched_count(buckets: Any) -> None:
        for bucket in buckets:
            seen.counted[bucket.name].append(bucket.cost)
        count(buckets)

    monkeypatch.setattr(plane, "rate_count", watched_count)


def body(model: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": QUESTION}], **fields}


async def send(
    key: ApiKey, request: dict[str, Any], **headers: str
) -> HttpResponse | EventStreamResponse:
    return await send_for_key(
        key=key,
        surface=CHAT,
        body=orjson.dumps(request),
        headers={"Accept": "application/json", **headers},
        request_id=f"req_close_{next(_names)}",
    )


def spent(key: ApiKey) -> Decimal:
    try:
        row = BudgetSpend.objects.filter(owner=BudgetSpend.Owner.KEY, owner_id=key.id).first()
        return Decimal(0) if row is None else row.spent_usd
    finally:
        connection.close()


async def spent_now(key: ApiKey) -> Decimal:
    return await asyncio.to_thread(spent, key)


async def settled_runs(*run_ids: str) -> dict[str, Run]:
    """The runs stored, their charges settled on the ledger (writer and settlements drained)."""
    await settlements_drained()
    await close_run_writer()

    def read() -> dict[str, Run]:
        try:
            assert not BudgetHold.objects.filter(run_id__in=run_ids).exists()
            return {run.pk: run for run in Run.objects.filter(pk__in=run_ids)}
        finally:
            connection.close()

    return await asyncio.to_thread(read)


def closed_once(seen: Watched, run_id: str) -> Closed:
    closes = seen.closes[run_id]
    assert len(closes) == 1, f"{run_id} was closed {len(closes)} times"
    return closes[0]


def tokens_bucket(key: ApiKey) -> str:
    return f"key:{key.id}:tokens"


def cost_at_prices(run: Run) -> Decimal:
    """The run's usage at the model's prices, worked out here from its stored tokens."""
    prompt, completion = run.prompt_tokens or 0, run.completion_tokens or 0
    return (prompt * PRICE_INPUT + completion * PRICE_OUTPUT) / Decimal(1_000_000)


def assert_charged_from_its_close(
    closed: Closed, run: Run, *, spent_before: Decimal, spent_after: Decimal
) -> None:
    """The stored run, and the budget, moved by the close's cost and charge."""
    assert (run.cost, run.charged_usd) == (closed.cost, closed.charged_usd)
    assert closed.charged_usd is not None
    assert spent_after - spent_before == closed.charged_usd


async def drained(response: HttpResponse | EventStreamResponse) -> list[bytes]:
    assert isinstance(response, EventStreamResponse)
    events = [event async for event in response]
    response.finished()
    return events


async def test_a_completed_run_is_charged_its_usage_at_the_model_s_prices(
    setting: Setting, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch_the_limiter(monkeypatch, watched)
    before = await spent_now(setting.key)

    response = await send(setting.key, body("close-scripted", stream=False))

    assert isinstance(response, HttpResponse) and response.status_code == 200
    run_id = response["X-Mortar-Run-Id"]
    run = (await settled_runs(run_id))[run_id]
    closed = closed_once(watched, run_id)
    assert (run.status, run.finish_reason, run.usage_source) == ("completed", "stop", "estimate")
    assert closed.cost == cost_at_prices(run) > 0
    assert closed.charged_usd == to_micro(closed.cost)
    assert_charged_from_its_close(
        closed, run, spent_before=before, spent_after=await spent_now(setting.key)
    )
    # The prompt was taken when admitted; the close counts the reply.
    assert closed.rate_limit_tokens == run.completion_tokens > 0
    assert watched.counted[tokens_bucket(setting.key)] == [closed.rate_limit_tokens]


async def test_a_run_cut_at_its_length_is_charged_the_tokens_it_made(
    setting: Setting, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch_the_limiter(monkeypatch, watched)
    before = await spent_now(setting.key)

    response = await send(setting.key, body("close-scripted", stream=False, max_tokens=3))

    run_id = response["X-Mortar-Run-Id"]
    run = (await settled_runs(run_id))[run_id]
    closed = closed_once(watched, run_id)
    assert (run.status, run.finish_reason, run.completion_tokens) == ("completed", "length", 3)
    assert closed.cost == cost_at_prices(run)
    assert_charged_from_its_close(
        closed, run, spent_before=before, spent_after=await spent_now(setting.key)
    )
    assert watched.counted[tokens_bucket(setting.key)] == [3] == [closed.rate_limit_tokens]


async def test_a_stopped_run_is_charged_what_it_made_before_the_stop(
    setting: Setting, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch_the_limiter(monkeypatch, watched)
    before = await spent_now(setting.key)
    response = await send(setting.key, body("close-slow", stream=True))
    assert isinstance(response, EventStreamResponse)
    run_id = response["X-Mortar-Run-Id"]

    events = []
    async for event in response:
        events.append(event)
        if b'"content"' in event and len(events) == 3:
            assert await live_generations().stop(run_id, setting.key.organization_id)
    response.finished()

    run = (await settled_runs(run_id))[run_id]
    closed = closed_once(watched, run_id)
    assert run.status == "stopped"
    assert 0 < (run.completion_tokens or 0) < 12
    assert closed.cost == cost_at_prices(run)
    assert_charged_from_its_close(
        closed, run, spent_before=before, spent_after=await spent_now(setting.key)
    )
    assert watched.counted[tokens_bucket(setting.key)] == [run.completion_tokens]


async def test_a_run_whose_client_left_is_charged_what_was_made_and_closed_once(
    setting: Setting, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch_the_limiter(monkeypatch, watched)
    before = await spent_now(setting.key)
    response = await send(setting.key, body("close-slow", stream=True))
    assert isinstance(response, EventStreamResponse)
    run_id = response["X-Mortar-Run-Id"]

    iterator = aiter(response)
    for _ in range(3):  # the role chunk and two pieces, then the client goes
        await anext(iterator)
    await response.events.aclose()
    response.finished()  # what the server does when the client left: a second close, ignored

    run = (await settled_runs(run_id))[run_id]
    closed = closed_once(watched, run_id)
    assert (run.status, run.error_code) == ("cancelled", "client_disconnected")
    assert closed.cost == cost_at_prices(run)
    assert_charged_from_its_close(
        closed, run, spent_before=before, spent_after=await spent_now(setting.key)
    )
    assert sum(watched.counted[tokens_bucket(setting.key)]) == closed.rate_limit_tokens


async def test_a_model_server_failing_before_its_first_byte_charges_the_prompt_it_had(
    setting: Setting, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch_the_limiter(monkeypatch, watched)
    before = await spent_now(setting.key)
    request = body("close-upstream", stream=False)
    request["messages"][0]["content"] += " [mock fault=error500]"

    response = await send(setting.key, request)

    assert response.status_code >= 500
    run_id = response["X-Mortar-Run-Id"]
    run = (await settled_runs(run_id))[run_id]
    closed = closed_once(watched, run_id)
    assert (run.status, run.completion_tokens) == ("failed", 0)
    assert closed.cost == cost_at_prices(run) == run.prompt_tokens * PRICE_INPUT / 10**6
    assert_charged_from_its_close(
        closed, run, spent_before=before, spent_after=await spent_now(setting.key)
    )
    # The prompt it had is the prompt admitted: nothing more to count.
    assert closed.rate_limit_tokens == 0
    assert watched.counted[tokens_bucket(setting.key)] == []


async def test_a_model_server_failing_mid_stream_charges_what_was_relayed(
    setting: Setting, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch_the_limiter(monkeypatch, watched)
    before = await spent_now(setting.key)
    request = body("close-upstream", stream=True)
    request["messages"][0]["content"] += " [mock fault=drop chunks=10]"

    response = await send(setting.key, request)
    events = await drained(response)

    assert b'"error"' in events[-1]
    run_id = response["X-Mortar-Run-Id"]
    run = (await settled_runs(run_id))[run_id]
    closed = closed_once(watched, run_id)
    assert run.status == "failed"
    assert (run.completion_tokens or 0) > 0
    assert closed.cost == cost_at_prices(run)
    assert_charged_from_its_close(
        closed, run, spent_before=before, spent_after=await spent_now(setting.key)
    )
    assert watched.counted[tokens_bucket(setting.key)] == [closed.rate_limit_tokens]
    assert closed.rate_limit_tokens == run.completion_tokens


async def test_a_run_its_budget_cannot_pay_is_refused_and_costs_nothing(
    setting: Setting, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch_the_limiter(monkeypatch, watched)

    response = await send(setting.poor_key, body("close-scripted", stream=False))

    assert response.status_code == 402
    run_id = response["X-Mortar-Run-Id"]
    run = (await settled_runs(run_id))[run_id]
    closed = closed_once(watched, run_id)
    assert (run.status, run.error_code) == ("refused", "insufficient_quota")
    # Refused before it held anything: no cost, no charge, nothing counted.
    assert (closed.cost, closed.charged_usd, closed.rate_limit_tokens) == (None, None, 0)
    assert (run.cost, run.charged_usd, run.held_usd) == (None, None, None)
    assert await spent_now(setting.poor_key) == 0
    assert watched.counted == {}


async def test_a_run_over_its_rate_limit_is_refused_and_costs_nothing(
    setting: Setting, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch_the_limiter(monkeypatch, watched)

    first = await send(setting.limited_key, body("close-scripted", stream=False))
    second = await send(setting.limited_key, body("close-scripted", stream=False))

    assert (first.status_code, second.status_code) == (200, 429)
    run_id = second["X-Mortar-Run-Id"]
    run = (await settled_runs(run_id))[run_id]
    closed = closed_once(watched, run_id)
    assert (run.status, run.error_code) == ("refused", "rate_limit_exceeded")
    assert (closed.cost, closed.charged_usd, closed.rate_limit_tokens) == (None, None, 0)
    assert (run.cost, run.charged_usd) == (None, None)


async def test_a_dedupe_follower_is_answered_for_nothing_and_its_hold_released(
    setting: Setting, watched: Watched, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch_the_limiter(monkeypatch, watched)
    before = await spent_now(setting.key)
    headers = {"X-Mortar-Dedupe": "in-flight", "Idempotency-Key": f"close-{uuid.uuid4().hex}"}
    request = body("close-slow", stream=False)

    responses = await asyncio.gather(
        send(setting.key, request, **headers), send(setting.key, request, **headers)
    )

    roles = {response["X-Mortar-Dedupe"]: response for response in responses}
    assert set(roles) == {"leader", "shared"}
    leader_id, follower_id = (roles[role]["X-Mortar-Run-Id"] for role in ("leader", "shared"))
    runs = await settled_runs(leader_id, follower_id)
    leader, follower = closed_once(watched, leader_id), closed_once(watched, follower_id)
    # The follower's usage is the leader's, recorded; the leader's run alone is charged.
    assert runs[follower_id].usage == runs[leader_id].usage
    assert (follower.cost, follower.charged_usd, follower.rate_limit_tokens) == (
        Decimal(0),
        Decimal(0),
        0,
    )
    assert runs[follower_id].held_usd is not None and runs[follower_id].held_usd > 0
    assert (runs[follower_id].cost, runs[follower_id].charged_usd) == (0, 0)
    assert leader.cost == cost_at_prices(runs[leader_id]) > 0
    assert (runs[leader_id].cost, runs[leader_id].charged_usd) == (
        leader.cost,
        leader.charged_usd,
    )
    assert await spent_now(setting.key) - before == leader.charged_usd
    assert watched.counted[tokens_bucket(setting.key)] == [leader.rate_limit_tokens]


async def test_the_limiter_is_counted_what_the_close_counted(
    setting: Setting, watched: Watched
) -> None:
    """Beyond the spy: the limiter itself moved by the prompt admitted and the close's count.

    A bucket's state is its theoretical arrival time (TAT), a token's worth of time past now
    for each token in it; kept ahead of now throughout (300 tokens, 3 s, taken first), it moves
    by exactly what is taken and counted, whatever the time the request took."""
    key = setting.counted_key
    interval_ms = 60_000 / COUNTED_PER_MINUTE
    plane = backplane()
    assert await plane.rate_admit([Bucket(tokens_bucket(key), COUNTED_PER_MINUTE, 300)])

    async def arrival_ms() -> float:
        verdict = await plane.rate_admit([Bucket(tokens_bucket(key), COUNTED_PER_MINUTE, 0)])
        assert verdict is not None
        return verdict.states[0].reset_ms + time.monotonic() * 1000

    before = await arrival_ms()
    response = await send(key, body("close-scripted", stream=False))
    after = await arrival_ms()

    run_id = response["X-Mortar-Run-Id"]
    run = (await settled_runs(run_id))[run_id]
    closed = closed_once(watched, run_id)
    assert closed.rate_limit_tokens == run.completion_tokens > 0
    taken = (after - before) / interval_ms
    assert abs(taken - (run.prompt_tokens or 0) - closed.rate_limit_tokens) < 0.5
