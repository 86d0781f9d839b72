"""Budgets with holds: exactly what a budget can pay for, then 402; exact across two
worker processes; a killed worker's hold reconciled; `GET /v1/budget` agrees with the charges.

Prices are set so the scripted model's example request costs a known amount: "What does
max_tokens limit?" is 17 prompt tokens and its reply 13 tokens, so at $1,000 per million input
tokens and $2,000 per million output tokens it costs 0.017 + 13 * 0.002 = $0.043.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import orjson
import pytest
from django.db.models import Q, Sum

from billing.budgets import TOTAL_PERIOD_START
from billing.models import BudgetHold, BudgetSpend
from billing.services.ledger import budget_holds_reconcile
from billing.tasks import reconcile_budget_holds
from telemetry.models import Run
from tests.conftest import _server_env, wait_for_run
from tests.support.budgets import (
    EXAMPLE_USD,
    PROMPT_USD,
    QUESTION,
    TOKEN_USD,
    budget_tenant,
    committed,
    complete,
    kill_mid_stream,
    read_budget,
    send_together,
    settled,
    settled_charges,
    spend_of,
)
from tests.support.servers import ServerProcess, start_mortar
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db


def test_a_budget_pays_for_exactly_the_requests_it_can_then_answers_402(
    mortar_server: ServerProcess, budget_model: str
) -> None:
    # Two whole requests, then one that can pay its prompt and 5 of its 13 tokens.
    budget = 2 * EXAMPLE_USD + PROMPT_USD + 5 * TOKEN_USD  # $0.113
    tenant = budget_tenant(key_usd=str(budget))

    first = complete(mortar_server, tenant.secret, budget_model, max_tokens=13)
    second = complete(mortar_server, tenant.secret, budget_model, max_tokens=13)
    lowered = complete(mortar_server, tenant.secret, budget_model, max_tokens=13)
    refused = complete(mortar_server, tenant.secret, budget_model, max_tokens=13)

    assert [r.status_code for r in (first, second, lowered)] == [200, 200, 200]
    assert first.json()["choices"][0]["finish_reason"] == "stop"
    assert second.json()["usage"]["completion_tokens"] == 13
    assert lowered.json()["choices"][0]["finish_reason"] == "length"
    assert lowered.json()["usage"]["completion_tokens"] == 5
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "insufficient_quota"
    assert refused.json()["error"]["type"] == "insufficient_quota"

    ids = [r.headers["X-Mortar-Run-Id"] for r in (first, second, lowered, refused)]
    wait_until(lambda: settled(ids), message="holds were not settled")
    runs = [wait_for_run(run_id) for run_id in ids]
    assert [(run.held_usd, run.charged_usd) for run in runs[:3]] == [
        (EXAMPLE_USD, EXAMPLE_USD),
        (EXAMPLE_USD, EXAMPLE_USD),
        (PROMPT_USD + 5 * TOKEN_USD, PROMPT_USD + 5 * TOKEN_USD),
    ]
    assert runs[2].max_tokens == 5  # the cap was lowered to what the budget could pay
    assert (runs[3].status, runs[3].http_status, runs[3].error_code) == (
        Run.Status.REFUSED,
        402,
        "insufficient_quota",
    )
    assert (runs[3].held_usd, runs[3].charged_usd) == (None, None)  # refused: not charged

    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (budget, Decimal(0))
    assert read_budget(mortar_server, tenant.secret) == {
        "organization": None,
        "key": {
            "budget_usd": "0.113000",
            "period": "total",
            "spent_usd": "0.113000",
            "held_usd": "0.000000",
            "remaining_usd": "0.000000",
            "resets_at": None,
        },
    }


def test_the_messages_route_answers_402_with_billing_error(
    mortar_server: ServerProcess, budget_model: str
) -> None:
    # Less than the prompt and one token ($0.019) on the organization's budget.
    tenant = budget_tenant(org_usd="0.018")

    response = httpx.post(
        f"{mortar_server.base_url}/v1/messages",
        content=orjson.dumps(
            {
                "model": budget_model,
                "max_tokens": 13,
                "messages": [{"role": "user", "content": QUESTION}],
            }
        ),
        headers={"x-api-key": tenant.secret, "anthropic-version": "2023-06-01"},
        timeout=30,
    )

    assert response.status_code == 402
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "billing_error"
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.http_status, run.charged_usd) == (402, None)
    assert not BudgetSpend.objects.filter(
        owner=BudgetSpend.Owner.ORGANIZATION, owner_id=tenant.organization_id, spent_usd__gt=0
    ).exists()
    report = read_budget(mortar_server, tenant.secret)
    assert report["key"] is None
    assert report["organization"]["remaining_usd"] == "0.018000"


def test_a_request_must_fit_both_the_organization_s_and_the_key_s_budget(
    mortar_server: ServerProcess, budget_model: str
) -> None:
    # The key could pay for 10; the organization for one whole request and one of 2 tokens.
    tenant = budget_tenant(org_usd=str(EXAMPLE_USD + PROMPT_USD + 2 * TOKEN_USD), key_usd="0.43")

    whole = complete(mortar_server, tenant.secret, budget_model, max_tokens=13)
    lowered = complete(mortar_server, tenant.secret, budget_model, max_tokens=13)
    refused = complete(mortar_server, tenant.secret, budget_model, max_tokens=13)

    assert [r.status_code for r in (whole, lowered, refused)] == [200, 200, 402]
    assert lowered.json()["usage"]["completion_tokens"] == 2
    ids = [r.headers["X-Mortar-Run-Id"] for r in (whole, lowered)]
    wait_until(lambda: settled(ids), message="holds were not settled")
    charged = EXAMPLE_USD + PROMPT_USD + 2 * TOKEN_USD
    assert spend_of(BudgetSpend.Owner.ORGANIZATION, tenant.organization_id).spent_usd == charged
    assert spend_of(BudgetSpend.Owner.KEY, tenant.key_id).spent_usd == charged


def test_a_model_without_prices_is_never_refused_for_budget(
    mortar_server: ServerProcess, free_model: str
) -> None:
    broke = budget_tenant(key_usd="0.000001", org_usd="0")

    answered = complete(mortar_server, broke.secret, free_model)

    assert answered.status_code == 200
    run = wait_for_run(answered.headers["X-Mortar-Run-Id"])
    assert (run.held_usd, run.charged_usd) == (None, None)
    # (By owner and id: keys and organizations number apart, and other tests' rows remain.)
    assert not BudgetSpend.objects.filter(
        Q(owner=BudgetSpend.Owner.KEY, owner_id=broke.key_id)
        | Q(owner=BudgetSpend.Owner.ORGANIZATION, owner_id=broke.organization_id)
    ).exists()


@pytest.mark.postgres
def test_100_concurrent_requests_over_two_processes_never_charge_more_than_the_budget(
    mortar_server: ServerProcess, second_server: ServerProcess, budget_model: str
) -> None:
    budget = Decimal("0.5")  # 11 whole requests ($0.473), then one of its prompt and 5 tokens
    tenant = budget_tenant(key_usd=str(budget))
    responses = send_together(
        [mortar_server, second_server], tenant.secret, budget_model, count=100, at_once=100
    )
    # Every answered request is charged its cost, to the micro-dollar; no refused one is.
    charged = settled_charges(responses)
    assert charged <= budget
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) >= 11  # holds of $0.043 each: at least 11 fit at any time
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (charged, Decimal(0))
    assert Decimal(read_budget(second_server, tenant.secret)["key"]["spent_usd"]) == charged


def test_a_killed_worker_s_hold_expires_and_is_reconciled(
    mortar_server: ServerProcess, slow_budget_model: str, tmp_path_factory: Any
) -> None:
    tenant = budget_tenant(key_usd="1")
    doomed = start_mortar(_server_env(), log_dir=tmp_path_factory.mktemp("doomed"))
    # Killed once its run is stored: no settlement, no close, the hold is left behind.
    run_id = kill_mid_stream(
        doomed,
        tenant.secret,
        slow_budget_model,
        stored=lambda run_id: Run.objects.filter(id=run_id).exists(),
    )

    hold = BudgetHold.objects.get(run_id=run_id)
    assert hold.amount_usd == EXAMPLE_USD
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (Decimal(0), EXAMPLE_USD)

    # Before it expires, nothing happens to it; after, it is charged from the stored run.
    # (Committed, as the Celery task's would be, so the server reads it too.)
    early = hold.expires_at - timedelta(seconds=1)
    assert committed(lambda: budget_holds_reconcile(now=early)) == 0
    assert committed(lambda: budget_holds_reconcile(now=hold.expires_at)) == 1

    assert not BudgetHold.objects.filter(run_id=run_id).exists()
    spend.refresh_from_db()
    # The run left no usage (it never finished): the prompt alone is charged.
    assert (spend.spent_usd, spend.held_usd) == (PROMPT_USD, Decimal(0))
    run = Run.objects.get(id=run_id)
    assert (run.held_usd, run.charged_usd) == (EXAMPLE_USD, PROMPT_USD)
    assert Decimal(read_budget(mortar_server, tenant.secret)["key"]["spent_usd"]) == PROMPT_USD
    # Safe to run again: nothing is charged twice.
    assert committed(lambda: budget_holds_reconcile(now=hold.expires_at)) == 0


def test_charges_agree_with_the_stored_runs(
    mortar_server: ServerProcess, budget_model: str
) -> None:
    tenant = budget_tenant(key_usd="10")
    responses = [
        complete(mortar_server, tenant.secret, budget_model, max_tokens=n) for n in (1, 4, 13)
    ]
    ids = [r.headers["X-Mortar-Run-Id"] for r in responses]
    wait_until(lambda: settled(ids), message="holds were not settled")
    for run_id in ids:
        wait_for_run(run_id)
    total = Run.objects.filter(id__in=ids).aggregate(total=Sum("charged_usd"))["total"]
    assert total == 3 * PROMPT_USD + 18 * TOKEN_USD
    assert read_budget(mortar_server, tenant.secret)["key"]["spent_usd"] == f"{total:.6f}"


def test_a_shared_answer_is_not_charged_twice(
    mortar_server: ServerProcess, slow_budget_model: str
) -> None:
    tenant = budget_tenant(key_usd="1")
    barrier = threading.Barrier(5)

    def send(_: int) -> httpx.Response:
        barrier.wait()
        return httpx.post(
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "model": slow_budget_model,
                    "stream": False,
                    "max_tokens": 13,
                    "messages": [{"role": "user", "content": QUESTION}],
                }
            ),
            headers={
                "Authorization": f"Bearer {tenant.secret}",
                "X-Mortar-Dedupe": "in-flight",
                "Idempotency-Key": "budget-shared",
            },
            timeout=60,
        )

    with ThreadPoolExecutor(5) as pool:
        responses = list(pool.map(send, range(5)))

    assert [r.status_code for r in responses] == [200] * 5
    roles = sorted(r.headers["X-Mortar-Dedupe"] for r in responses)
    assert roles == ["leader"] + ["shared"] * 4
    ids = [r.headers["X-Mortar-Run-Id"] for r in responses]
    wait_until(lambda: settled(ids), message="holds were not settled")
    runs = {run.dedupe_role: run for run in (wait_for_run(run_id) for run_id in ids)}
    assert runs["leader"].charged_usd == EXAMPLE_USD
    assert runs["shared"].charged_usd == Decimal(0)  # held before dedupe, then released
    total = Run.objects.filter(id__in=ids).aggregate(total=Sum("charged_usd"))["total"]
    assert total == EXAMPLE_USD
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (EXAMPLE_USD, Decimal(0))


def test_the_reconciliation_task_charges_a_finished_run_s_stored_cost(
    mortar_server: ServerProcess, budget_model: str
) -> None:
    """A hold whose settlement was lost (its worker died just after the run was stored) is
    charged the run's stored cost, not the prompt alone."""
    tenant = budget_tenant(key_usd="1")
    response = complete(mortar_server, tenant.secret, budget_model, max_tokens=4)
    run_id = response.headers["X-Mortar-Run-Id"]
    wait_until(lambda: settled([run_id]), message="the hold was not settled")
    run = wait_for_run(run_id)

    def lose_the_settlement() -> None:
        # Put the hold back as if the worker had died before settling it.
        spend = BudgetSpend.objects.get(owner=BudgetSpend.Owner.KEY, owner_id=tenant.key_id)
        BudgetSpend.objects.filter(id=spend.id).update(
            spent_usd=0, held_usd=PROMPT_USD + 4 * TOKEN_USD
        )
        BudgetHold.objects.create(
            run_id=run_id,
            key_spend=spend,
            amount_usd=PROMPT_USD + 4 * TOKEN_USD,
            prompt_usd=PROMPT_USD,
            expires_at=run.accepted_at,
        )
        Run.objects.filter(id=run_id).update(charged_usd=None)

    committed(lose_the_settlement)
    assert committed(reconcile_budget_holds) == 1

    run.refresh_from_db()
    assert run.charged_usd == PROMPT_USD + 4 * TOKEN_USD == run.cost
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (PROMPT_USD + 4 * TOKEN_USD, Decimal(0))


def test_an_expired_hold_of_a_run_closed_without_usage_is_released_uncharged(
    sees_other_connections: None,
) -> None:
    """A run refused or cancelled before generation, whose worker lost its hold's release."""
    tenant = budget_tenant(key_usd="1")
    accepted = datetime.now(UTC)

    def leave_a_hold() -> None:
        spend = BudgetSpend.objects.create(
            owner=BudgetSpend.Owner.KEY,
            owner_id=tenant.key_id,
            period="total",
            period_start=TOTAL_PERIOD_START,
            held_usd=EXAMPLE_USD,
        )
        Run.objects.create(
            id="chatcmpl-b0d9e7000000000000000001",
            organization_id=tenant.organization_id,
            status=Run.Status.CANCELLED,
            accepted_at=accepted,
            held_usd=EXAMPLE_USD,
        )
        BudgetHold.objects.create(
            run_id="chatcmpl-b0d9e7000000000000000001",
            key_spend=spend,
            amount_usd=EXAMPLE_USD,
            prompt_usd=PROMPT_USD,
            expires_at=accepted,
        )

    committed(leave_a_hold)
    assert committed(lambda: budget_holds_reconcile(now=accepted)) == 1

    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (Decimal(0), Decimal(0))
    run = Run.objects.get(id="chatcmpl-b0d9e7000000000000000001")
    assert run.charged_usd == Decimal(0)
