"""GET /v1/telemetry/stream across worker processes, and the cost of a run."""

from __future__ import annotations

from decimal import Decimal

import httpx
import orjson
import pytest

from tests.conftest import Tenant, manage, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.telemetry import Subscriber
from tests.support.upstreams import MockPair

pytestmark = pytest.mark.django_db


def complete(server: ServerProcess, tenant: Tenant, **body) -> httpx.Response:
    body.setdefault("messages", [{"role": "user", "content": "hello"}])
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps({"stream": False, **body}),
        headers={"Authorization": f"Bearer {tenant.secret}", **body.pop("headers", {})},
        timeout=30,
    )


def finished(run_id: str):  # type: ignore[no-untyped-def]
    return lambda events: any(e["type"] == "cost" and e["runId"] == run_id for e in events)


@pytest.mark.redis
def test_one_subscriber_sees_the_events_of_both_processes(
    mortar_server, second_server, tenant
) -> None:
    subscriber = Subscriber(mortar_server, tenant.secret)
    one = complete(mortar_server, tenant).headers["X-Mortar-Run-Id"]
    two = complete(second_server, tenant).headers["X-Mortar-Run-Id"]
    subscriber.wait_for(lambda events: finished(one)(events) and finished(two)(events))
    subscriber.close()

    for run_id in (one, two):
        types = [e["type"] for _, e in subscriber.events if e["runId"] == run_id]
        assert types == [
            "request.accepted",
            "optimizer.report",
            "request.routed",
            "generation.first_token",
            "generation.finished",
            "cache",
            "cost",
        ]
    ids = [event_id for event_id, _ in subscriber.events]
    assert len(set(ids)) == len(ids)


@pytest.mark.redis
def test_a_reconnect_with_last_event_id_gets_what_it_missed(
    mortar_server, second_server, tenant
) -> None:
    first = Subscriber(mortar_server, tenant.secret)
    seen = complete(mortar_server, tenant).headers["X-Mortar-Run-Id"]
    first.wait_for(finished(seen))
    first.close()
    last_id = first.events[-1][0]

    missed = [
        complete(server, tenant).headers["X-Mortar-Run-Id"]
        for server in (mortar_server, second_server)
    ]
    wait_for_run(missed[-1])
    again = Subscriber(second_server, tenant.secret, last_event_id=last_id)
    again.wait_for(lambda events: all(finished(r)(events) for r in missed))
    again.close()
    run_ids = {event["runId"] for _, event in again.events}
    assert seen not in run_ids
    assert set(missed) <= run_ids


def test_the_stream_is_scoped_to_the_organization_and_filters_by_session(
    mortar_server, tenant, other_tenant
) -> None:
    mine = Subscriber(mortar_server, tenant.secret, session="only-this")
    theirs = Subscriber(mortar_server, other_tenant.secret)
    other_session = complete(mortar_server, tenant, headers={"X-Mortar-Session": "another"})
    wanted = complete(mortar_server, tenant, headers={"X-Mortar-Session": "only-this"})
    # One process publishes its events in order: by the time the wanted run's last event is
    # read, an event of the earlier run in another session would have been read before it.
    mine.wait_for(finished(wanted.headers["X-Mortar-Run-Id"]))
    # The other organization's stream: a run of its own, published after ours, marks how far
    # it has been read; anything of ours leaked into it would come before.
    marker = complete(mortar_server, other_tenant).headers["X-Mortar-Run-Id"]
    theirs.wait_for(finished(marker))
    mine.close()
    theirs.close()
    assert {e["runId"] for _, e in mine.events} == {wanted.headers["X-Mortar-Run-Id"]}
    assert other_session.headers["X-Mortar-Run-Id"] not in {e["runId"] for _, e in mine.events}
    assert [e for _, e in theirs.events if e["runId"] != marker] == []


def test_a_bad_last_event_id_is_refused(mortar_server, tenant) -> None:
    response = httpx.get(
        f"{mortar_server.base_url}/v1/telemetry/stream",
        headers={"Authorization": f"Bearer {tenant.secret}", "Last-Event-ID": "yesterday"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_parameter"


def test_a_run_costs_its_usage_at_the_models_prices(
    mortar_server, tenant, upstream_models: MockPair, tmp_path
) -> None:
    config = tmp_path / "priced.yaml"
    config.write_text(f"""
deployments:
  - name: priced-upstream
    upstreams: ["{MockPair.url(upstream_models.a)}"]
models:
  - id: priced
    deployment: priced-upstream
    prices: {{input: 0.20, cached_input: 0.05, output: 0.60}}
""")
    manage("applyconfig", str(config))
    subscriber = Subscriber(mortar_server, tenant.secret)
    response = complete(
        mortar_server,
        tenant,
        model="priced",
        messages=[{"role": "user", "content": "[mock chunks=4 cached=3]"}],
    )
    usage = response.json()["usage"]
    run_id = response.json()["id"]
    subscriber.wait_for(finished(run_id))
    subscriber.close()

    prompt, cached, completion = (
        usage["prompt_tokens"],
        usage["prompt_tokens_details"]["cached_tokens"],
        usage["completion_tokens"],
    )
    expected = (
        (prompt - cached) * Decimal("0.20")
        + cached * Decimal("0.05")
        + completion * Decimal("0.60")
    ) / 1_000_000
    run = wait_for_run(run_id)
    assert run.cost == expected
    assert run.cached_tokens == 3
    cost = next(e for _, e in subscriber.events if e["type"] == "cost" and e["runId"] == run_id)
    assert Decimal(cost["cost"]) == expected
    assert cost["usageSource"] == "upstream"
    cache = next(e for _, e in subscriber.events if e["type"] == "cache" and e["runId"] == run_id)
    assert (cache["cachedTokens"], cache["promptTokens"]) == (3, prompt)
    assert cache["replica"] == "priced-upstream/0"  # its name: API clients never see its URL
    assert run.replica == MockPair.url(upstream_models.a)  # operators do


def test_a_reconnect_to_the_same_process_with_last_event_id_gets_what_it_missed(
    mortar_server, tenant
) -> None:
    first = Subscriber(mortar_server, tenant.secret)
    seen = complete(mortar_server, tenant).headers["X-Mortar-Run-Id"]
    first.wait_for(finished(seen))
    first.close()
    last_id = first.events[-1][0]

    missed = [complete(mortar_server, tenant).headers["X-Mortar-Run-Id"] for _ in range(2)]
    again = Subscriber(mortar_server, tenant.secret, last_event_id=last_id)
    again.wait_for(lambda events: all(finished(r)(events) for r in missed))
    again.close()
    run_ids = {event["runId"] for _, event in again.events}
    assert seen not in run_ids
    assert set(missed) <= run_ids


def test_a_subscriber_gets_every_event_published_once_it_is_connected(
    mortar_server, tenant
) -> None:
    # "From now" means from the moment the client has its headers (`: connected`), not a little
    # later: the starting point is fixed before the response starts.
    for attempt in range(5):
        subscriber = Subscriber(mortar_server, tenant.secret, session=f"from-now-{attempt}")
        run_id = complete(
            mortar_server, tenant, headers={"X-Mortar-Session": f"from-now-{attempt}"}
        ).headers["X-Mortar-Run-Id"]
        subscriber.wait_for(finished(run_id))
        subscriber.close()
        assert subscriber.events[0][1]["type"] == "request.accepted"
        assert {event["runId"] for _, event in subscriber.events} == {run_id}
