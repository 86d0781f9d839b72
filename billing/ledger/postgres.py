"""The ledger on Postgres: each batch one call of its SQL functions (`sql/`), one round trip.

`mortar_budget_holds` takes a batch of holds in the batch's order, `mortar_budget_settle`
settles a batch of runs, `mortar_budget_release` gives back what a slice did not draw. Called
through psycopg's own cursor, with server-bound parameters (`prepare=True` asks psycopg to
prepare each statement once; Django's connections have preparation off, `prepare_threshold`
None, which a transaction pooler needs, so the statements are parsed each time: measured, that
costs this process some 15 µs a call).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson
import psycopg
from django.db import connection, transaction
from psycopg.types.json import Jsonb

from billing.budgets import Budget, period_start
from billing.costs import to_micro
from billing.errors import InsufficientQuota
from billing.ledger import refusal
from billing.ledger.entries import Held, HoldRequest, Settlement
from billing.models import BudgetSpend


@contextmanager
def _server_bound_cursor() -> Iterator[psycopg.Cursor[Any]]:
    """psycopg's own cursor on this thread's connection, binding parameters on the server
    (Django's cursor quotes them into the text, in Python: three times the cost of the call);
    its errors still become Django's."""
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


_HOLDS = "SELECT run_id, max_tokens, amount_usd, remaining_usd FROM mortar_budget_holds(%s)"
_SETTLE = "SELECT run_id, charged_usd FROM mortar_budget_settle(%s)"
_SETTLE_BATCH = "SELECT count(*) FROM mortar_budget_settle(%s)"
_RELEASE = "SELECT mortar_budget_release(%s, %s)"


def _budget_fields(prefix: str, budget: Budget | None, now: datetime) -> dict[str, object]:
    if budget is None:
        return {}  # absent: NULL in the function's record, that owner has no budget
    return {
        f"{prefix}_id": budget.owner_id,
        f"{prefix}_period": budget.period,
        f"{prefix}_start": period_start(budget.period, now),
        f"{prefix}_usd": str(budget.usd),
    }


class PostgresLedger:
    slices = True

    def transaction(self) -> AbstractContextManager[None]:
        return transaction.atomic()

    def holds(
        self, requests: Sequence[HoldRequest], *, now: datetime
    ) -> list[Held | InsufficientQuota]:
        # One jsonb parameter, encoded in C (orjson): psycopg's adaptation of thirteen
        # parameters a request, in Python, cost more than the function's work.
        items = []
        for request in requests:
            by_owner = {budget.owner: budget for budget in request.budgets}
            items.append(
                {
                    "run_id": request.run_id,
                    **_budget_fields(
                        "organization", by_owner.get(BudgetSpend.Owner.ORGANIZATION), now
                    ),
                    **_budget_fields("key", by_owner.get(BudgetSpend.Owner.KEY), now),
                    "prompt_cost": str(request.prompt_cost),
                    "per_token": str(request.per_token),
                    "max_tokens": request.max_tokens,
                    "expires_at": request.expires_at,
                }
            )
        with _server_bound_cursor() as cursor:
            rows = cursor.execute(
                _HOLDS, [Jsonb(items, dumps=orjson.dumps)], prepare=True
            ).fetchall()
        held = {run_id: (cap, amount, remaining) for run_id, cap, amount, remaining in rows}
        answers: list[Held | InsufficientQuota] = []
        for request in requests:
            cap, amount, remaining = held[request.run_id]
            prompt_cost = request.prompt_cost
            if cap < 0:
                answers.append(refusal(prompt_cost + request.per_token, remaining))
            else:
                answers.append(
                    Held(
                        max_tokens=cap,
                        amount_usd=amount,
                        prompt_usd=to_micro(prompt_cost),
                        remaining_usd=remaining,
                    )
                )
        return answers

    def settle(self, settlements: Sequence[Settlement]) -> dict[str, Decimal]:
        # One statement: outside a transaction (a worker settling when responses end), its
        # own, one round trip where BEGIN and COMMIT would make three.
        with _server_bound_cursor() as cursor:
            return dict(cursor.execute(_SETTLE, [_settle_items(settlements)]).fetchall())

    def settle_batch(self, settlements: Sequence[Settlement]) -> int:
        with _server_bound_cursor() as cursor:
            row = cursor.execute(_SETTLE_BATCH, [_settle_items(settlements)]).fetchone()
        return int(row[0]) if row is not None else 0

    def release_slice(self, slice_id: str, amount: Decimal) -> None:
        # Its own transaction: a worker gives a slice back outside any other.
        with transaction.atomic(), _server_bound_cursor() as cursor:
            cursor.execute(_RELEASE, [slice_id, amount], prepare=True)


def _settle_items(settlements: Sequence[Settlement]) -> Jsonb:
    """`mortar_budget_settle`'s argument: each run's charge, and its draw from a slice if any."""
    items: list[dict[str, str]] = []
    for settlement in settlements:
        item = {"run_id": settlement.run_id, "charged": str(settlement.charged_usd)}
        draw = settlement.draw
        if draw is not None:
            item["slice_id"] = draw.slice_id
            item["amount"] = str(draw.amount_usd)
            item["prompt_usd"] = str(draw.prompt_usd)
        items.append(item)
    return Jsonb(items, dumps=orjson.dumps)
