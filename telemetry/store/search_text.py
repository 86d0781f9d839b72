"""The text a run is found by in the dashboard's search: its request's messages and its reply.

Both are computed once per run, never per chunk: the prompt's text by the run writer (on its
own thread) from the body it stores, the reply's by the relay from the reply it has already put
together. Postgres tokenizes them once, when the run's finished row is written (~0.5 to 1 µs a
word), so each is capped: a 4 MiB agent prompt costs no more to index than 16 K characters (and
stays far below Postgres' 1 MB limit on a tsvector). Of a longer text the start and the end
are kept: of a prompt, the system prompt and the task, and the latest turns.
"""

from __future__ import annotations

from typing import Any

import orjson

PROMPT_TEXT_LIMIT = 16_384
REPLY_TEXT_LIMIT = 16_384
# The keys under which a request carries text meant for the model, in chat completions' and
# Messages' shapes: message and part contents, the Messages `system`, tool call arguments and
# Anthropic's `tool_result` / `thinking` blocks. Roles, types, ids and image references are not.
_TEXT_KEYS = frozenset(("content", "text", "system", "arguments", "thinking"))


def capped(text: str, limit: int) -> str:
    """The text, or its first and last halves when it is longer than `limit` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n{text[-half:]}"


def prompt_text(body: bytes | None) -> str:
    """The text of a request's messages (and Messages' `system`), one piece a line."""
    if not body:
        return ""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""  # a refused body that is not JSON: nothing a person would search for
    if not isinstance(request, dict):
        return ""
    pieces: list[str] = []
    _collect(request.get("system"), pieces)
    _collect(request.get("messages"), pieces)
    return capped("\n".join(pieces), PROMPT_TEXT_LIMIT)


def _collect(value: Any, pieces: list[str]) -> None:
    if isinstance(value, str):
        pieces.append(value)
    elif isinstance(value, list):
        for item in value:
            _collect(item, pieces)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in _TEXT_KEYS or key in ("tool_calls", "function"):
                _collect(item, pieces)
