"""Replay a stored run's stream byte for byte, resumable, following a run still in flight.

Each stored event goes out as it was sent, behind an `id: <seq>` line, so a client that drops
resumes with `Last-Event-ID` (the last id it got) or `?from=<seq>` (the first it wants). With
`pace=original` the recorded gaps between chunks are kept. A run still in progress is replayed
as far as it is stored, then followed — new chunks are picked up as the run writer stores them
— until the run ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime

from replay.selectors import chunks_after, run_status
from telemetry.models import Run

FOLLOW_POLL_SECONDS = 0.1


async def replay_events(
    run_id: str,
    *,
    after: int,
    pace_original: bool,
    in_progress: bool,
    accepted_at: datetime | None = None,
) -> AsyncIterator[bytes]:
    last = after
    started = time.monotonic()
    first_offset: int | None = None
    finished_at: float | None = None
    while True:
        chunks = await chunks_after(run_id, last, accepted_at=accepted_at)
        for chunk in chunks:
            if pace_original:
                if first_offset is None:
                    first_offset = chunk.offset_us
                due = started + (chunk.offset_us - first_offset) / 1_000_000
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            last = chunk.seq
            yield f"id: {chunk.seq}\n".encode() + bytes(chunk.data)
        if chunks:
            continue
        if not in_progress:
            return
        # Following a live run: stop once it has ended and its last chunks are in.
        if finished_at is None:
            status = await run_status(run_id, accepted_at=accepted_at)
            if status != Run.Status.IN_PROGRESS:
                finished_at = time.monotonic()
        elif time.monotonic() - finished_at > FOLLOW_POLL_SECONDS * 3:
            return
        await asyncio.sleep(FOLLOW_POLL_SECONDS)
