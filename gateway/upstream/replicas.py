"""Choose the replica for a request: the session's own, unless it is cooling down after a fault.

A replica is known to API clients by its name, `<deployment>/<position>` (its place in the
deployment's `upstreams`, from 0: `vllm-a/1`), in `X-Mortar-Upstream`, error messages and
telemetry events; its URL is an internal address that only operators see (the stored run, the
dashboard, the admin, the logs): an API client never learns where a model server is.

Sessions map to replicas by rendezvous (highest-random-weight) hashing: each replica scores
`hash(session, replica)` and the highest wins. Requests of one session therefore reach the
replica that already holds their prompt prefix (the point of `X-Mortar-Session`), and a replica
that goes away moves only its own sessions — every other session's winner is unchanged.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

COOL_DOWN_SECONDS = 30.0
MAX_ATTEMPTS = 3


def replica_name(deployment: str, upstreams: Sequence[str], url: str) -> str:
    """The name API clients know the replica at `url` by: `<deployment>/<position>`."""
    return f"{deployment}/{upstreams.index(url)}"


def replica_score(session: str, replica: str) -> int:
    digest = hashlib.blake2b(f"{session}\0{replica}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def replicas_for_session(session: str, replicas: Sequence[str]) -> list[str]:
    """All replicas, the session's own first, then the order it fails over in."""
    if len(replicas) == 1:
        return list(replicas)  # nothing to rank
    return sorted(replicas, key=lambda replica: replica_score(session, replica), reverse=True)


class ReplicaHealth:
    """Which replicas failed recently, per process; a failed one sits out a cool-down."""

    def __init__(self, cool_down: float = COOL_DOWN_SECONDS):
        self.cool_down = cool_down
        self._failed_until: dict[str, float] = {}

    def mark_failed(self, replica: str) -> None:
        self._failed_until[replica] = time.monotonic() + self.cool_down

    def is_healthy(self, replica: str) -> bool:
        until = self._failed_until.get(replica)
        if until is None:
            return True
        if time.monotonic() >= until:
            del self._failed_until[replica]
            return True
        return False


@dataclass(frozen=True)
class Route:
    home: str  # the session's own replica
    attempts: list[str]  # what to try, in order


def route_session(session: str, replicas: Sequence[str], health: ReplicaHealth) -> Route:
    ranked = replicas_for_session(session, replicas)
    # Healthy replicas first; cooling ones stay as a last resort rather than failing outright.
    ordered = [r for r in ranked if health.is_healthy(r)] + [
        r for r in ranked if not health.is_healthy(r)
    ]
    return Route(home=ranked[0], attempts=ordered[:MAX_ATTEMPTS])


replica_health = ReplicaHealth()
