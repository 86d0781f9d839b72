"""The optimizer's passes: small pure functions over a normalized message list.

Each pass takes the messages and returns new messages and how many things it changed. It never
mutates its input: a changed message is a new dict, and an unchanged one is shared between the
input and the output (not copied), so treat both lists as read-only. What the passes do is
versioned by ``RULESET``; change it whenever any pass's output changes.

``json-compact`` (lossless, on by default)
    The content of a ``tool`` message, and the ``function.arguments`` of an assistant's
    ``tool_calls``, when that text is a JSON object or array, loses its insignificant
    whitespace (see ``json_text``). Counts the JSON texts it changed.
``json-tool-blocks`` (opt-in)
    In a ``tool`` message whose content is not itself JSON, the body of each ```json fenced
    block that is a JSON object or array is compacted the same way; the fences, the text
    around them and blocks that are not JSON are kept byte for byte. Counts the blocks changed.
``collapse-spaces`` (opt-in, lossy by design: alignment is lost)
    In a ``tool`` message whose content is not JSON, every run of two or more spaces (U+0020)
    with a character other than a space or a line break on both sides, within one line,
    becomes one space. Leading indentation and trailing spaces are kept, as are tabs and the
    bodies of ```json fenced blocks, whose strings are data. Counts the tool messages changed.

Only ``tool`` messages and tool-call arguments are touched: text written by people
(``system``, ``user``) or by the model (assistant ``content``) is never rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from gateway.optimizer.json_text import (
    compact_fenced_json,
    compact_json,
    fenced_json_blocks,
    is_json,
)

RULESET = 2

Message = dict[str, Any]
Pass = Callable[[Sequence[Message]], tuple[list[Message], int]]

# The first space of a run (preceded by a character that is not a space or line break), the
# rest of the run (possessive: never given back), then something that is not a line break.
_ALIGNMENT_RUN = re.compile(r" (?<=[^ \r\n] ) ++(?=[^ \r\n])")


def json_compact(messages: Sequence[Message]) -> tuple[list[Message], int]:
    """Compact the JSON in tool results and tool-call arguments."""
    result: list[Message] = []
    changed = 0
    for message in messages:
        role = message.get("role")
        if role == "tool":
            content = message.get("content")
            compact = compact_json(content) if isinstance(content, str) else None
            if compact is not None and compact != content:
                message = {**message, "content": compact}
                changed += 1
        elif role == "assistant" and message.get("tool_calls"):
            calls, compacted = _compact_arguments(message["tool_calls"])
            if compacted:
                message = {**message, "tool_calls": calls}
                changed += compacted
        result.append(message)
    return result, changed


def _compact_arguments(calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    result = []
    changed = 0
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        compact = compact_json(arguments) if isinstance(arguments, str) else None
        if compact is not None and compact != arguments:
            call = {**call, "function": {**function, "arguments": compact}}
            changed += 1
        result.append(call)
    return result, changed


def json_tool_blocks(messages: Sequence[Message]) -> tuple[list[Message], int]:
    """Compact the ```json fenced blocks inside tool results that are not JSON themselves."""
    return _rewrite_tool_results(messages, _compact_blocks)


def _compact_blocks(content: str) -> tuple[str, int]:
    # A JSON tool result can only hold a fence inside a string, where it is data.
    if "```" not in content or is_json(content):
        return content, 0
    return compact_fenced_json(content)


def collapse_spaces(messages: Sequence[Message]) -> tuple[list[Message], int]:
    """Collapse column-alignment runs of spaces in tool results that are not JSON."""
    return _rewrite_tool_results(messages, _collapse_content)


def _collapse_content(content: str) -> tuple[str, int]:
    if "  " not in content or is_json(content):
        return content, 0
    if "```" not in content:
        collapsed = _ALIGNMENT_RUN.sub(" ", content)
    else:
        pieces = []
        start = 0
        for block in fenced_json_blocks(content):
            pieces.append(_ALIGNMENT_RUN.sub(" ", content[start : block.start]))
            pieces.append(content[block.start : block.end])
            start = block.end
        pieces.append(_ALIGNMENT_RUN.sub(" ", content[start:]))
        collapsed = "".join(pieces)
    return collapsed, int(collapsed != content)


def _rewrite_tool_results(
    messages: Sequence[Message], rewrite: Callable[[str], tuple[str, int]]
) -> tuple[list[Message], int]:
    result: list[Message] = []
    changed = 0
    for message in messages:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, str):
            rewritten, count = rewrite(content)
            if rewritten != content:
                message = {**message, "content": rewritten}
                changed += count
        result.append(message)
    return result, changed


# In the order they run; a request's header names a set, never an order.
PASSES: dict[str, Pass] = {
    "json-compact": json_compact,
    "json-tool-blocks": json_tool_blocks,
    "collapse-spaces": collapse_spaces,
}
LOSSLESS_DEFAULTS: tuple[str, ...] = ("json-compact",)
OPT_IN_PASSES: tuple[str, ...] = ("json-tool-blocks", "collapse-spaces")


def run_passes(
    messages: Sequence[Message], names: Sequence[str]
) -> tuple[list[Message], tuple[tuple[str, int], ...]]:
    """Run the named passes in pass order; return the messages and (name, count) per change."""
    unknown = set(names) - PASSES.keys()
    if unknown:
        raise ValueError(f"unknown optimizer passes: {sorted(unknown)}")
    result = list(messages)
    counts: list[tuple[str, int]] = []
    for name, run in PASSES.items():
        if name not in names:
            continue
        result, changed = run(result)
        if changed:
            counts.append((name, changed))
    return result, tuple(counts)
