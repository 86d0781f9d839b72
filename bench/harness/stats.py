"""The one percentile every benchmark in bench/ reports, and a latency summary built on it.

The percentile is the nearest rank: the smallest value with at least q% of the values at or
below it, never an interpolation between two (a reported p99 is a latency some request had).
Medians over a measurement's rounds are `statistics.median`, the middle of an odd count and
the mean of the two middle values of an even one; wrk's own p50 and p99 are wrk's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0 to 100) of `values` by nearest rank; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary_ms(values_s: Sequence[float]) -> dict[str, float | None]:
    """Count, p50, p90, p99, p99.9 and max of durations in seconds, in milliseconds."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 3)

    return {
        "n": len(values_s),
        "p50_ms": ms(percentile(values_s, 50)),
        "p90_ms": ms(percentile(values_s, 90)),
        "p99_ms": ms(percentile(values_s, 99)),
        "p999_ms": ms(percentile(values_s, 99.9)),
        "max_ms": ms(max(values_s) if values_s else None),
    }
