"""Identifiers for runs, sessions and requests: unique and unpredictable.

Nothing is authorized by knowing an id (stop, replay and telemetry check the organization), yet
an id must not give away the next ones: each comes from the operating system's CSPRNG
(`os.urandom`, what `secrets.token_hex` reads), never from `random`, whose Mersenne Twister is
cloned from 624 of its outputs (208 run ids were enough to predict another organization's
next ones). One `getrandom` call per id costs about what the old generator did (~0.45 µs), and a
forked worker shares no state with its parent.
"""

from __future__ import annotations

import os
import re

# What a run id can be: printable ASCII without a slash or a space, at most 40 characters (the
# run store's key). Anything else — a NUL, another control character, non-ASCII — names no run
# and never reaches the database (Postgres refuses a NUL in text: it was a 500).
RUN_ID_PATTERN = r"[!-.0-~]{1,40}"
_RUN_ID = re.compile(RUN_ID_PATTERN)


def is_run_id(value: str) -> bool:
    """Whether `value` could name a run; one that could not is unknown, without a lookup."""
    return _RUN_ID.fullmatch(value) is not None


def new_hex_id(hex_digits: int = 24) -> str:
    """A random id of `hex_digits` lowercase hex digits (an even number)."""
    return os.urandom(hex_digits // 2).hex()
