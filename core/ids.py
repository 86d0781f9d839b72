"""Identifiers for completions, sessions and requests: unique and unpredictable.

Nothing is authorized by knowing an id (stop, replay and telemetry check the organization), yet
an id must not give away the next ones: each comes from the operating system's CSPRNG
(`os.urandom`, what `secrets.token_hex` reads), never from `random`, whose Mersenne Twister is
cloned from 624 of its outputs (issue 15: 208 run ids predicted another organization's next
ones). One `getrandom` call per id costs about what the old generator did (~0.45 µs), and a
forked worker shares no state with its parent.
"""

from __future__ import annotations

import os
import re

# A run's id is its reply's id, and says which API surface made it (PRODUCT.md decision 11,
# issue 13): a chat completion's `chatcmpl-` + 24 hex, or a Message's `msg_` + 24 hex.
COMPLETION_ID_PREFIX = "chatcmpl-"
MESSAGE_ID_PREFIX = "msg_"


# What a run id can be: printable ASCII without a slash or a space, at most 40 characters (the
# run store's key). Anything else — a NUL, another control character, non-ASCII — names no run
# and never reaches the database (Postgres refuses a NUL in text: issue 15, a 500).
RUN_ID_PATTERN = r"[!-.0-~]{1,40}"
_RUN_ID = re.compile(RUN_ID_PATTERN)


def is_run_id(value: str) -> bool:
    """Whether `value` could name a run; one that could not is unknown, without a lookup."""
    return _RUN_ID.fullmatch(value) is not None


def is_message_id(run_id: str) -> bool:
    """Whether the run is a Messages run (`POST /v1/messages`)."""
    return run_id.startswith(MESSAGE_ID_PREFIX)


def new_hex_id(hex_digits: int = 24) -> str:
    """A random id of `hex_digits` lowercase hex digits (an even number)."""
    return os.urandom(hex_digits // 2).hex()
