"""The acceptance times of the runs a batch names: each run's partition of the run and chunk tables
(``telemetry.store.partitions``), which its later chunks and its outcome's UPDATE name so that
Postgres touches the one partition where the run is.

The writer knows them from the runs it stored; a run it did not store itself (a dead worker's
rows, replayed) is looked up in the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from telemetry.models import Run
from telemetry.store.fields import RunFields
from telemetry.store.items import Chunk
from telemetry.store.run_table import run_table


class AcceptedTimes:
    """The acceptance times of the runs this process's writer stored and has not closed. Only a
    shortcut: a run it does not know is looked up (one query for a batch's unknown runs)."""

    # Bounded: runs left open forever (a client gone, its close lost) must not grow it.
    LIMIT = 50_000

    def __init__(self) -> None:
        self._times: dict[str, datetime] = {}

    def of(
        self,
        cursor: psycopg.Cursor[Any],
        new_runs: Sequence[RunFields],
        chunks: Sequence[Chunk],
        updates: dict[str, RunFields],
    ) -> dict[str, datetime]:
        """The acceptance time of every run the batch names; a run not stored has none."""
        accepted = self._times
        if len(accepted) + len(new_runs) > self.LIMIT:
            accepted.clear()
        column = run_table().accepted_at
        for fields in new_runs:
            accepted[fields["id"]] = column.prepare(fields["accepted_at"])
        unknown = {chunk[0] for chunk in chunks}.difference(accepted)
        unknown.update(run_id for run_id in updates if run_id not in accepted)
        if unknown:
            cursor.execute(
                f"SELECT id, accepted_at FROM {run_table().name} WHERE id = ANY(%s)",
                [list(unknown)],
            )
            accepted.update(cursor.fetchall())
        return accepted

    def forget(self, new_runs: Sequence[RunFields], updates: dict[str, RunFields]) -> None:
        """Forget the runs stored closed or closed now: nothing more of theirs comes."""
        closed = [fields["id"] for fields in new_runs if _closes(fields)]
        closed.extend(run_id for run_id, fields in updates.items() if _closes(fields))
        for run_id in closed:
            self._times.pop(run_id, None)


def _closes(fields: RunFields) -> bool:
    return fields.get("status", Run.Status.IN_PROGRESS) != Run.Status.IN_PROGRESS
