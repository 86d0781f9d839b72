"""The lock a run's chunks are counted under: the sweep that closes a dead worker's runs
(`telemetry.services.interruptions`) and a replay writing their chunks
(`telemetry.store.batches.write_batch`) both take it, so a sweep never counts a run's chunks
between a replay's and its commit."""

from __future__ import annotations

from collections.abc import Collection

from telemetry.models import Run


def runs_lock(run_ids: Collection[str], *, in_progress_only: bool = False) -> set[str]:
    """Lock these runs until the transaction ends, and return the ids locked.

    Always in id order, so sweepers and replays never deadlock one another. (SQLite: each
    transaction holds the whole database already.)
    """
    runs = Run.objects.filter(pk__in=run_ids)
    if in_progress_only:
        runs = runs.filter(status=Run.Status.IN_PROGRESS)
    return set(runs.order_by("pk").select_for_update(no_key=True).values_list("pk", flat=True))
