"""A run's records captured instead of queued: the run writer's items kept in a list, to be
written by the run store's own batch write (`telemetry.store.batches.write_batch`) or read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from telemetry.recording import RunSink
from telemetry.store.items import WriterItem
from telemetry.store.writer import RunWriter


class CapturingWriter:
    """Takes what a sink hands the run writer."""

    def __init__(self) -> None:
        self.items: list[WriterItem] = []

    def submit(self, item: WriterItem) -> None:
        self.items.append(item)


def capturing_sink() -> tuple[RunSink, CapturingWriter]:
    """A sink whose rows are captured (and no live events)."""
    writer = CapturingWriter()
    return RunSink(writer=cast(RunWriter, writer), events=None), writer


@dataclass(frozen=True)
class SinkRun:
    """What a sink reads of a run, for the sink's own tests."""

    run_id: str
    organization_id: int = 1
    organization_name: str = "sink-test"
    route: str = "/v1/chat/completions"
    session: str = ""
    keeps_content: bool = True
