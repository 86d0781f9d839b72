"""What the request path hands the run writer — a run opened, a chunk sent, a run closed — and
the same items as plain values (``encode_row``), the form the spool and the crash log keep."""

from __future__ import annotations

from typing import NamedTuple

from telemetry.store.draws import BudgetDraw
from telemetry.store.fields import ImageRecord, RunFields
from telemetry.store.spool import Row

# Named tuples: the request path makes one per chunk, and a tuple costs half what a frozen
# dataclass does to make; a ChunkSent is also, as it is, the row COPY writes.


class RunOpened(NamedTuple):
    fields: RunFields
    # The images its request carried, stored once each by content (`telemetry.store.images`).
    images: tuple[ImageRecord, ...] = ()


class ChunkSent(NamedTuple):
    run_id: str
    seq: int
    offset_us: int
    data: bytes


# A chunk's values as a plain tuple, in `ChunkSent`'s order: what the Postgres writer takes.
Chunk = tuple[str, int, int, bytes]


class RunClosed(NamedTuple):
    run_id: str
    fields: RunFields


WriterItem = RunOpened | ChunkSent | RunClosed


def encode_row(item: WriterItem) -> Row:
    """A writer item as a tuple of plain values, for the spool."""
    if isinstance(item, ChunkSent):
        return ("c", item.run_id, item.seq, item.offset_us, item.data)
    if isinstance(item, RunOpened):
        images = [tuple(image) for image in item.images]
        return ("o", item.fields, images) if images else ("o", item.fields)
    return ("x", item.run_id, item.fields)


def decode_row(row: Row) -> WriterItem:
    """The writer item a spooled row stands for."""
    kind = row[0]
    if kind == "c":
        return ChunkSent._make(row[1:])
    if kind == "o":
        images = tuple(ImageRecord._make(image) for image in row[2]) if len(row) > 2 else ()
        fields = row[1]
        if len(row) > 3:
            # Spooled by a worker from before the draw was part of the run's fields.
            draw = BudgetDraw._make(row[3])
            fields = {**fields, "budget_slice": draw.slice_id, "held_prompt_usd": draw.prompt_usd}
        return RunOpened(fields, images)
    if kind == "x":
        return RunClosed._make(row[1:])
    raise ValueError(f"unknown spooled row kind {kind!r}")
