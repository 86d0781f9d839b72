"""Budgets in tests: tenants with budgets, committed for the servers to see, and the
requests and reads the budget tests share.

Prices are set so the scripted model's example request costs a known amount: "What does
max_tokens limit?" is 17 prompt tokens and its reply 13 tokens, so at $1,000 per million input
tokens and $2,000 per million output tokens it costs 0.017 + 13 * 0.002 = $0.043 (the models
are `tests/conftest.py`'s `budget_model` and `slow_budget_model`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

import httpx
import orjson
from django.db import connection

from accounts.models import ApiKey, Organization
from accounts.services import key_create
from billing.models import BudgetHold, BudgetSpend
from telemetry.models import Run
from tests.conftest import wait_for_run
from tests.support.servers import ServerProcess
from tests.support.waiting import wait_until

T = TypeVar("T")

QUESTION = "What does max_tokens limit?"
PROMPT_USD = Decimal("0.017")  # 17 tokens at $0.001
TOKEN_USD = Decimal("0.002")  # one output token
EXAMPLE_USD = PROMPT_USD + 13 * TOKEN_USD  # $0.043


@dataclass(frozen=True)
class BudgetTenant:
    organization_id: int
    key_id: int
    secret: str


def committed(make: Callable[[], T]) -> T:
    """Run `make` on a connection of its own, so what it writes is committed for the servers
    (the test's own connection is inside a transaction that is rolled back)."""

    def run() -> T:
        try:
            return make()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


_names = iter(range(1_000_000))


def budget_tenant(*, key_usd: str | None = None, org_usd: str | None = None) -> BudgetTenant:
    """A fresh organization and key with these `total` budgets, committed."""

    def make() -> BudgetTenant:
        organization = Organization.objects.create(
            name=f"budget-{threading.get_ident()}-{next(_names)}-{id(make)}",
            budget_usd=None if org_usd is None else Decimal(org_usd),
            budget_period="total",
        )
        issued = key_create(organization=organization, name="budget")
        if key_usd is not None:
            ApiKey.objects.filter(id=issued.key.id).update(
                budget_usd=Decimal(key_usd), budget_period="total"
            )
        return BudgetTenant(organization.id, issued.key.id, issued.secret)

    return committed(make)


def complete(server: ServerProcess, secret: str, model: str, **fields: Any) -> httpx.Response:
    body = {
        "model": model,
        "stream": False,
        "messages": [{"role": "user", "content": QUESTION}],
        **fields,
    }
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=60,
    )


def read_budget(server: ServerProcess, secret: str) -> dict[str, Any]:
    response = httpx.get(
        f"{server.base_url}/v1/budget", headers={"Authorization": f"Bearer {secret}"}
    )
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def settled(run_ids: list[str]) -> bool:
    """Each run stored, and none holding anything. Stored first: a slice's draw not settled
    yet is no hold of its own until its run's row is (it is held as part of its slice)."""
    stored = Run.objects.filter(id__in=run_ids).count() == len(set(run_ids))
    return stored and not BudgetHold.objects.filter(run_id__in=run_ids).exists()


def spend_of(owner: str, owner_id: int) -> BudgetSpend:
    return BudgetSpend.objects.get(owner=owner, owner_id=owner_id, period="total")


def kill_mid_stream(
    server: ServerProcess, secret: str, model: str, *, stored: Callable[[str], bool]
) -> str:
    """Start a 13-token stream on `server`, and once generation has started and `stored(run
    id)` holds, kill the server (SIGKILL: nothing settled, nothing closed); return the run id."""
    try:
        with httpx.stream(
            "POST",
            f"{server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "model": model,
                    "stream": True,
                    "max_tokens": 13,
                    "messages": [{"role": "user", "content": QUESTION}],
                }
            ),
            headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
        ) as response:
            run_id = response.headers["X-Mortar-Run-Id"]
            received = response.iter_bytes()  # kept: a dropped iterator closes the stream
            next(received)  # generation has started
            wait_until(lambda: stored(run_id), message=f"run {run_id} not stored as expected")
            server.process.kill()
            server.process.wait()
    finally:
        server.stop()
    return run_id


def cost_of(response: httpx.Response) -> Decimal:
    """What an answered example request costs at the budget models' prices."""
    usage = response.json()["usage"]
    prompt, completion = int(usage["prompt_tokens"]), int(usage["completion_tokens"])
    return prompt * Decimal("0.001") + completion * TOKEN_USD


def send_together(
    servers: list[ServerProcess], secret: str, model: str, *, count: int, at_once: int
) -> list[httpx.Response]:
    """`count` example requests with 13 output tokens, over the servers in turn, `at_once` at a
    time (the first `at_once` released together)."""
    barrier = threading.Barrier(at_once)

    def send(i: int) -> httpx.Response:
        if i < at_once:
            barrier.wait()
        return complete(servers[i % len(servers)], secret, model, max_tokens=13)

    with ThreadPoolExecutor(at_once) as pool:
        return list(pool.map(send, range(count)))


def settled_charges(responses: list[httpx.Response]) -> Decimal:
    """Wait until the requests' runs are stored and settled; check that every answered one is
    charged its cost, to the micro-dollar, and no refused (402) one anything; return the sum."""
    assert {r.status_code for r in responses} <= {200, 402}
    ids = [r.headers["X-Mortar-Run-Id"] for r in responses]
    wait_until(lambda: settled(ids), timeout=30, message="holds were not settled")
    runs = [wait_for_run(run_id) for run_id in ids]
    for response, run in zip(responses, runs, strict=True):
        expected = cost_of(response) if response.status_code == 200 else None
        assert run.charged_usd == expected, (response.status_code, run.id)
    return sum((run.charged_usd or Decimal(0) for run in runs), Decimal(0))
