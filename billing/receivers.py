"""Settle the charges the run writer stores, in its transaction (SQLite).

On Postgres, triggers on the run table settle a run's charge with the statement that stores it
(`billing/ledger/sql/`). On SQLite the writer sends `telemetry.signals.run_charges_stored`
instead, inside the same transaction — the run store sits below billing and cannot call it —
and the ledger's Python twin settles them here: charged in the commit that stores them, or not
at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from billing.services.ledger import budget_holds_settle


def settle_stored_charges(
    sender: Any, *, charges: Sequence[tuple[str, Decimal]], **kwargs: Any
) -> None:
    budget_holds_settle(charges)
