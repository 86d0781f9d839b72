"""Identifiers for completions, sessions and requests: unique, cheap, not secrets.

Nothing is authorized by knowing an id (stop, replay and telemetry check the organization), so
ids come from a per-process generator seeded from the OS, not from `secrets` (one system call
each, measurable on the hot path).
"""

from __future__ import annotations

import os
import random

_generator = random.Random(int.from_bytes(os.urandom(32), "big"))


# A run's id is its reply's id, and says which API surface made it (PRODUCT.md decision 11,
# issue 13): a chat completion's `chatcmpl-` + 24 hex, or a Message's `msg_` + 24 hex.
COMPLETION_ID_PREFIX = "chatcmpl-"
MESSAGE_ID_PREFIX = "msg_"


def is_message_id(run_id: str) -> bool:
    """Whether the run is a Messages run (`POST /v1/messages`)."""
    return run_id.startswith(MESSAGE_ID_PREFIX)


def new_hex_id(hex_digits: int = 24) -> str:
    return f"{_generator.getrandbits(hex_digits * 4):0{hex_digits}x}"


def reseed_after_fork() -> None:
    _generator.seed(int.from_bytes(os.urandom(32), "big"))


os.register_at_fork(after_in_child=reseed_after_fork)
