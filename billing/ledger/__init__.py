"""The budget ledger: holds before generation, charges after, exact across workers.

Every change to a budget's period row (`BudgetSpend`) happens in one short transaction that
holds its row lock (`SELECT … FOR UPDATE` on Postgres), so two workers holding at once are
serialized by the database and `spent + held` never passes the budget. Locks are always taken
in one order — holds by run id, then period rows by id — so two transactions never wait on
each other in a circle.

Amounts are Decimal USD to the micro-dollar: a hold is rounded up (it must cover the cost), a
charge is the cost rounded up and never more than its hold (so the charges of a period never
pass its budget, whatever a model server reports).

One interface (`Ledger`), two implementations, chosen once per process by the database's
engine (`ledger()`: the one place billing asks which database it runs on):

- Postgres (`postgres.py`): the holds a worker takes together (those of one event-loop pass,
  or that arrived while the previous batch was committing) and a batch's settlement are each
  one call of a SQL function (`sql/`), one round trip and one commit where the same steps from
  Python took seven or eight a request — and one row lock held across one commit for the whole
  batch, not one per request. A trigger on the run table takes a run's draw from its
  worker's slice with the run's first insert, in the run writer's transaction; a settlement
  that comes first takes the draw itself (`sql/0003_settle_in_path.sql`).
- SQLite (`sqlite.py`, beside the SQL it stands in for; the embedded mode, one process): the
  same ledger in Python, with no row locks — a process-wide lock serializes its transactions
  — and no slices.

Either way a run's hold is settled by its own worker when its response ends
(`billing.services.holds.SettleBatches`): a hold from the ledger before the client has the
response's last byte, a draw from a slice (held on the ledger as the slice until then) in a
batch within a moment after it. The run writer only records what was charged.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from decimal import Decimal
from typing import Protocol

from django.db import connection

from billing.costs import to_micro
from billing.errors import InsufficientQuota
from billing.ledger.entries import Held, HoldRequest, Settlement


class Ledger(Protocol):
    """The budget ledger on one database: holds, settlements, slices given back."""

    # Whether a worker may hold from its slices of a budget in memory
    # (`billing.services.slices`): only where a run's first insert turns its draw into its own
    # hold, in the database (Postgres's triggers).
    slices: bool

    def transaction(self) -> AbstractContextManager[None]:
        """One ledger transaction (on SQLite, one at a time in this process)."""
        ...

    def holds(
        self, requests: Sequence[HoldRequest], *, now: datetime
    ) -> list[Held | InsufficientQuota]:
        """Take each request's hold, in the requests' order (`budget_holds`)."""
        ...

    def settle(self, settlements: Sequence[Settlement]) -> dict[str, Decimal]:
        """Charge runs and release their holds, all at once: in one transaction of its own,
        or in the caller's (`budget_holds_settle`)."""
        ...

    def settle_batch(self, settlements: Sequence[Settlement]) -> int:
        """`settle`, for a worker's batch that reads no run's charge back: how many runs were
        settled, without a row per run to send and parse."""
        ...

    def release_slice(self, slice_id: str, amount: Decimal) -> None:
        """Give back what a slice did not draw (`budget_slice_release`)."""
        ...


@functools.cache
def ledger() -> Ledger:
    """This process's ledger: the database's engine does not change while it runs, and
    `connection.vendor` goes through Django's per-thread connection lookup on every call."""
    # Imported here, not above: each implementation imports `refusal` from this module.
    if connection.vendor == "postgresql":
        from billing.ledger.postgres import PostgresLedger

        return PostgresLedger()
    from billing.ledger.sqlite import SqliteLedger

    return SqliteLedger()


def refusal(needed: Decimal, remaining: Decimal) -> InsufficientQuota:
    """The 402 of a request whose prompt and one output token its budget cannot pay."""
    return InsufficientQuota(
        f"This request needs at least ${to_micro(needed)} (its prompt and one output token); "
        f"the budget has ${to_micro(max(remaining, Decimal(0)))} left. See GET /v1/budget."
    )
