"""Rate limits per minute as GCRA (the generic cell rate algorithm): the types every backplane's
limiter speaks, the algorithm in plain Python (the in-process limiter of the embedded mode) and
the reset format of the `x-ratelimit-reset-*` headers clients already read (a Go duration).

A bucket allows `limit` units a minute. Its state is one number, the theoretical arrival time
(TAT): when the bucket would be empty again. A unit costs `60 s / limit`; a request of `cost`
units is admitted when, after it, the TAT is at most a minute ahead. So a full minute's worth
may come at once (a burst of `limit`), after which units come back one every `60 s / limit` —
the N+1st request of a burst waits exactly as long as one unit takes to come back. A request
larger than a whole minute (a prompt over the tokens-per-minute limit) is admitted into an empty
bucket only, rather than never.

Redis runs the same arithmetic in one Lua script (`core/backplane/ratelimit.lua`), so that
every bucket of a request is checked and taken atomically, across every worker.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

PERIOD_MS = 60_000.0
# Sums of 60 s / limit carry float error (7 * 60000/7 is a hair over 60000): waits and room
# within this many milliseconds of a whole count are rounded to it.
SLACK_MS = 0.01


# NamedTuples rather than frozen dataclasses: a request builds several of each, and a frozen
# dataclass's __init__ (object.__setattr__ per field) costs ten times a tuple's.
class Bucket(NamedTuple):
    """One limit a request must fit: its name (shared by every worker), its units per minute,
    and what this request takes from it."""

    name: str
    limit: int
    cost: int


class BucketState(NamedTuple):
    """Where a bucket stands after the request (before it, when the request was refused)."""

    limit: int
    remaining: int
    reset_ms: int  # until the bucket is full again


class Verdict(NamedTuple):
    admitted: bool
    retry_after_ms: int  # until the request would be admitted; 0 when it was
    states: tuple[BucketState, ...]  # one per bucket, in order


def _interval(limit: int) -> float:
    return PERIOD_MS / limit


def state_of(limit: int, ahead_ms: float) -> BucketState:
    """A bucket whose TAT is `ahead_ms` past now."""
    ahead_ms = max(ahead_ms, 0.0)
    remaining = math.floor((PERIOD_MS - ahead_ms + SLACK_MS) / _interval(limit))
    return BucketState(limit=limit, remaining=max(remaining, 0), reset_ms=math.ceil(ahead_ms))


class GcraBuckets:
    """GCRA buckets in this process's memory (the embedded mode's limiter), by name."""

    def __init__(self) -> None:
        self._tats: dict[str, float] = {}

    def admit(self, buckets: Sequence[Bucket], now_ms: float) -> Verdict:
        """Take every bucket's cost if all of them have room; none of them otherwise."""
        tats = [max(self._tats.get(bucket.name, now_ms), now_ms) for bucket in buckets]
        retry_after = 0.0
        for bucket, tat in zip(buckets, tats, strict=True):
            needed = min(_interval(bucket.limit) * bucket.cost, PERIOD_MS)
            retry_after = max(retry_after, tat - now_ms + needed - PERIOD_MS)
        if retry_after > SLACK_MS:
            return Verdict(
                admitted=False,
                retry_after_ms=math.ceil(retry_after),
                states=tuple(
                    state_of(bucket.limit, tat - now_ms)
                    for bucket, tat in zip(buckets, tats, strict=True)
                ),
            )
        states = []
        for bucket, tat in zip(buckets, tats, strict=True):
            new_tat = tat + _interval(bucket.limit) * bucket.cost
            self._tats[bucket.name] = new_tat
            states.append(state_of(bucket.limit, new_tat - now_ms))
        self._forget_empty(now_ms)
        return Verdict(admitted=True, retry_after_ms=0, states=tuple(states))

    def count(self, buckets: Sequence[Bucket], now_ms: float) -> None:
        """Add each bucket's cost (negative gives units back) without asking: usage that
        already happened."""
        for bucket in buckets:
            tat = max(self._tats.get(bucket.name, now_ms), now_ms)
            self._tats[bucket.name] = tat + _interval(bucket.limit) * bucket.cost

    def _forget_empty(self, now_ms: float) -> None:
        # Empty buckets are the default: drop them now and then, so the dict stays small.
        if len(self._tats) > 1024:
            self._tats = {name: tat for name, tat in self._tats.items() if tat > now_ms}


def reset_duration(ms: int) -> str:
    """The format of `x-ratelimit-reset-*` clients read, Go's duration: `12ms`, `1.5s`, `6m0s`."""
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest_ms = divmod(ms, 60_000)
    seconds = f"{rest_ms / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{minutes}m{seconds}s" if minutes else f"{seconds}s"
