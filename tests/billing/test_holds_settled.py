"""Every way a request ends after its hold was taken settles the hold, end to end.

A real server, budgets and priced models on the mock model server: a model server that answers
an error status before its first byte is charged the prompt it consumed; one that cannot be
reached, and a request refused after its hold (a dedupe conflict) leave their run charged
nothing; none leaves the budget holding anything, and a completion beside them is charged its
cost. (Without HTTP: tests/gateway/test_run_record.py.)
"""

from __future__ import annotations

import threading
from decimal import Decimal

import httpx
import orjson
import pytest

from billing.models import BudgetSpend
from gateway.models import Deployment
from telemetry.models import Run
from tests.conftest import _priced, wait_for_run
from tests.support.budgets import (
    EXAMPLE_USD,
    QUESTION,
    budget_tenant,
    complete,
    settled,
    spend_of,
)
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db

BUDGET = "1.000000"


@pytest.fixture(scope="session")
def priced_upstreams(
    upstream_models: MockPair, django_db_blocker, sees_other_connections: None
) -> tuple[str, str]:
    """Priced models on the mock (one replica) and on a model server nobody listens for."""
    with django_db_blocker.unblock():
        return (
            _priced("budget-mock-one", Deployment.objects.get(name="mock-one")),
            _priced("budget-mock-dead", Deployment.objects.get(name="mock-dead")),
        )


def settled_run(response: httpx.Response) -> Run:
    run_id = response.headers["X-Mortar-Run-Id"]
    wait_until(lambda: settled([run_id]), message=f"the hold of {run_id} was not settled")
    return wait_for_run(run_id)


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [("error500", 502, "upstream_error"), ("error400", 400, "upstream_error")],
)
def test_a_model_server_failing_before_its_first_byte_is_charged_the_prompt_it_consumed(
    mortar_server: ServerProcess,
    priced_upstreams: tuple[str, str],
    fault: str,
    status: int,
    code: str,
) -> None:
    """It had the request: the prompt it processed is charged (no usage reported: Mortar's
    count of the prompt, at the input price), and nothing stays held."""
    mock_one, _ = priced_upstreams
    tenant = budget_tenant(key_usd=BUDGET)

    failed = complete(
        mortar_server,
        tenant.secret,
        mock_one,
        max_tokens=13,
        messages=[{"role": "user", "content": f"{QUESTION} [mock fault={fault}]"}],
    )

    assert failed.status_code == status, failed.text
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    run = settled_run(failed)
    assert (run.status, run.error_code) == (
        Run.Status.FAILED if status >= 500 else Run.Status.REFUSED,
        code,
    )
    prompt_usd = run.prompt_tokens * Decimal("0.001")  # $1,000 per million input tokens
    assert run.prompt_tokens > 17 and run.completion_tokens == 0
    assert (run.cost, run.charged_usd, run.usage_source) == (prompt_usd, prompt_usd, "estimate")
    assert run.held_usd is not None and run.held_usd > prompt_usd
    # Settled when the error was answered, not when the run was stored.
    assert (spend.spent_usd, spend.held_usd) == (prompt_usd, Decimal(0))


def test_an_unreachable_model_server_leaves_nothing_charged_or_held(
    mortar_server: ServerProcess, priced_upstreams: tuple[str, str]
) -> None:
    _, dead = priced_upstreams
    tenant = budget_tenant(key_usd=BUDGET)

    unreachable = complete(mortar_server, tenant.secret, dead, max_tokens=13)

    assert unreachable.status_code == 503, unreachable.text
    run = settled_run(unreachable)
    assert (run.status, run.error_code) == (Run.Status.FAILED, "upstream_unavailable")
    assert run.charged_usd == Decimal(0)
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (Decimal(0), Decimal(0))


def test_a_request_refused_after_its_hold_is_charged_nothing_beside_one_that_completes(
    mortar_server: ServerProcess, slow_budget_model: str
) -> None:
    # The leader generates slowly; the same Idempotency-Key with another body while it runs
    # is refused (409) after its own hold was taken.
    tenant = budget_tenant(key_usd=BUDGET)
    headers = {
        "Authorization": f"Bearer {tenant.secret}",
        "X-Mortar-Dedupe": "in-flight",
        "Idempotency-Key": "settle-me",
    }

    def send(content: str) -> httpx.Response:
        body = {
            "model": slow_budget_model,
            "stream": False,
            "max_tokens": 13,
            "messages": [{"role": "user", "content": content}],
        }
        return httpx.post(
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(body),
            headers=headers,
            timeout=60,
        )

    answers: list[httpx.Response] = []
    leader = threading.Thread(target=lambda: answers.append(send(QUESTION)))
    leader.start()
    wait_until(
        lambda: Run.objects.filter(
            organization_id=tenant.organization_id, status=Run.Status.IN_PROGRESS
        ).exists(),
        message="the leader never started generating",
    )
    conflict = send(QUESTION + " Answer briefly.")
    leader.join(timeout=60)

    assert conflict.status_code == 409, conflict.text
    refused = settled_run(conflict)
    assert (refused.status, refused.error_code) == (Run.Status.REFUSED, "idempotency_conflict")
    assert refused.held_usd is not None and refused.held_usd > 0
    assert refused.charged_usd == Decimal(0)
    [completed] = answers
    assert completed.status_code == 200
    assert settled_run(completed).charged_usd == EXAMPLE_USD
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (EXAMPLE_USD, Decimal(0))
