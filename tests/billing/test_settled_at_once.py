"""A finished request's hold is settled before the client has the response's last byte: the
next request, sent right after, finds its budget as the finished ones left it — neither refused
nor cut short by a hold that is over — and `GET /v1/budget` already shows it.

Prices as in `test_budgets`: the example request costs $0.043 (17 prompt tokens at $0.001, 13
output tokens at $0.002). On the embedded default and on Postgres with Redis alike.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import orjson
import pytest

from billing.costs import MICRO
from tests.support.budgets import (
    EXAMPLE_USD,
    PROMPT_USD,
    QUESTION,
    TOKEN_USD,
    budget_tenant,
    complete,
    read_budget,
)
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

PAID_FOR = 4
# Four whole example requests and less than the prompt and one token more: a fifth is refused.
BUDGET = PAID_FOR * EXAMPLE_USD + PROMPT_USD + TOKEN_USD - Decimal("0.000001")


def usd(amount: Decimal) -> str:
    return str(amount.quantize(MICRO))


def streamed(server: ServerProcess, secret: str, model: str, **fields: Any) -> tuple[int, str]:
    """Send a streamed example request and read it to its end; its status and body."""
    body = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": QUESTION}],
        **fields,
    }
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=60,
    ) as response:
        return response.status_code, response.read().decode()


def finish_and_completion(text: str) -> tuple[str | None, int | None]:
    finish, completion = None, None
    for line in text.splitlines():
        if not line.startswith("data: {"):
            continue
        chunk = orjson.loads(line.removeprefix("data: "))
        for choice in chunk.get("choices") or ():
            finish = choice.get("finish_reason") or finish
        if chunk.get("usage"):
            completion = chunk["usage"]["completion_tokens"]
    return finish, completion


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_requests_one_after_another_are_paid_for_until_the_budget_is_spent_then_402(
    mortar_server: ServerProcess, budget_model: str, stream: bool
) -> None:
    tenant = budget_tenant(key_usd=str(BUDGET))

    for paid in range(1, PAID_FOR + 1):
        # A cap far above the 13 tokens the reply has: each hold is all the budget has left.
        if stream:
            status, text = streamed(mortar_server, tenant.secret, budget_model, max_tokens=1000)
            assert status == 200
            assert finish_and_completion(text) == ("stop", 13), paid
        else:
            response = complete(mortar_server, tenant.secret, budget_model, max_tokens=1000)
            assert response.status_code == 200, response.text
            choice = response.json()["choices"][0]
            assert (choice["finish_reason"], response.json()["usage"]["completion_tokens"]) == (
                "stop",
                13,
            ), paid
        # Read at once: settled already, nothing held.
        key = read_budget(mortar_server, tenant.secret)["key"]
        assert (key["spent_usd"], key["held_usd"]) == (usd(paid * EXAMPLE_USD), "0.000000"), paid
        assert Decimal(key["remaining_usd"]) == BUDGET - paid * EXAMPLE_USD

    refused = complete(mortar_server, tenant.secret, budget_model, max_tokens=1000)
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "insufficient_quota"
    assert "the budget has $0.018999 left" in refused.json()["error"]["message"]
    key = read_budget(mortar_server, tenant.secret)["key"]
    assert (key["spent_usd"], key["held_usd"]) == (usd(PAID_FOR * EXAMPLE_USD), "0.000000")
