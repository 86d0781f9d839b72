"""What a block of code leaves in reference cycles: objects only the garbage collector frees.

The worker runs with a large young generation (`config/asgi.py`, MORTAR_GC_YOUNG_THRESHOLD):
what requests leave in cycles piles up there, and each young collection walks and frees it all
at once — 18 to 28 ms at one connection before the cycles the tests name were cut.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def cyclic_garbage() -> Iterator[list[object]]:
    """Collect first, then run the block with the collector off; the list yielded is filled,
    after the block, with what the block left that only a collection frees."""
    gc.collect()
    gc.disable()
    found: list[object] = []
    try:
        yield found
    finally:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            found.extend(gc.garbage)
            gc.garbage.clear()
        finally:
            gc.set_debug(0)
            gc.enable()


def of_types(objects: list[object], *types: type) -> list[str]:
    """The names of the types, among `types`, of `objects` (what a test must not find)."""
    return sorted({type(o).__qualname__ for o in objects if isinstance(o, types)})
