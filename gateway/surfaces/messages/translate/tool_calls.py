"""A tool call in both dialects: its arguments (JSON text ⇄ an `input` object) and its id.

Shared by the request translation (a `tool_use` block sent back by a client becomes a
`tool_calls` entry) and the reply translation, streamed or not, so both give the same blocks.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Mapping
from typing import Any

import orjson

TOOL_USE_PREFIX = "toolu_"
# The key that holds a model's arguments when they are not a JSON object (see `tool_input`).
UNPARSED_ARGUMENTS_KEY = "_unparsed_arguments"
# A call id's alphanumeric tail shorter than this could repeat between calls; it is hashed.
_MIN_TAIL = 8
_ALNUM = frozenset(string.ascii_letters + string.digits)


def dump_json(value: Any) -> str:
    """Serialize a JSON value compactly, as Mortar writes JSON everywhere."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits, which orjson refuses and JSON allows
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def tool_input(arguments: str | None) -> dict[str, Any]:
    """The `input` object of a `tool_use` block made from a tool call's `arguments` text."""
    if arguments is None or not arguments.strip():
        return {}  # a function without parameters: model servers send "" or nothing
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        return value
    # Not a JSON object: broken JSON, or a string, a number, an array. Anthropic's `input` must
    # be an object, and `{}` would be unsafe: a tool without required parameters would run with
    # its defaults, an action the model never asked for. The text is kept under a key no tool
    # declares, so a client checking inputs against the schema refuses the call (and its agent
    # tells the model), and whoever reads the run sees what the model wrote.
    return {UNPARSED_ARGUMENTS_KEY: arguments}


def tool_use_id(call_id: Any, *, fallback: str) -> str:
    """The `toolu_…` id for a model server's tool-call id; the same call id, the same result.

    The tail of the call id after its last non-alphanumeric character is kept (vLLM's
    `chatcmpl-tool-5f0e…`, OpenAI's `call_Ab12…`), readable in logs beside the upstream's. A tail
    shorter than 8 characters (`call_0`) could repeat between calls, so it is replaced by a hash
    of the whole id; a call without an id is named by a hash of `fallback` (the message id and
    the call's position), which is the same for the streamed and the JSON reply.
    """
    if not isinstance(call_id, str) or not call_id:
        return TOOL_USE_PREFIX + _digest(fallback)
    tail_start = len(call_id)
    while tail_start > 0 and call_id[tail_start - 1] in _ALNUM:
        tail_start -= 1
    tail = call_id[tail_start:]
    if len(tail) >= _MIN_TAIL:
        return TOOL_USE_PREFIX + tail
    return TOOL_USE_PREFIX + _digest(call_id)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def call_arguments(call: Mapping[str, Any]) -> str | None:
    """The `arguments` text of a chat tool call, whatever the server left out."""
    function = call.get("function")
    if not isinstance(function, Mapping):
        return None
    arguments = function.get("arguments")
    return arguments if isinstance(arguments, str) else None
