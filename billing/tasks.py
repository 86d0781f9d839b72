"""Celery tasks of the billing app: the reconciliation of budget holds whose worker died.

Beat runs it every minute (`CELERY_BEAT_SCHEDULE` in config/settings.py). It takes no
arguments, calls one service and is safe to run twice, or twice at once: each expired hold is
settled under its row lock, and a hold already settled is skipped. A lost database connection
is retried a bounded number of times.
"""

from __future__ import annotations

from datetime import UTC, datetime

from billing.services.ledger import budget_holds_reconcile
from telemetry.tasks import retried_task


@retried_task
def reconcile_budget_holds() -> int:
    """Charge and release the budget holds that expired (their worker died mid-generation)."""
    return budget_holds_reconcile(now=datetime.now(UTC))
