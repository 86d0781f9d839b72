"""Budgets in tests (issue 14): tenants with budgets, committed for the servers to see, and the
requests and reads the budget tests share.

Prices are set so the scripted model's example request costs a known amount: "What does
max_tokens limit?" is 17 prompt tokens and its reply 13 tokens, so at $1,000 per million input
tokens and $2,000 per million output tokens it costs 0.017 + 13 * 0.002 = $0.043 (the models
are `tests/gateway/conftest.py`'s `budget_model` and `slow_budget_model`).
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
from telemetry.models import BudgetHold, BudgetSpend
from tests.support.servers import ServerProcess

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
    return not BudgetHold.objects.filter(run_id__in=run_ids).exists()


def spend_of(owner: str, owner_id: int) -> BudgetSpend:
    return BudgetSpend.objects.get(owner=owner, owner_id=owner_id, period="total")
