"""JSON text without its insignificant whitespace, and the fenced JSON blocks inside tool output.

The output of ``compact_json`` is the input minus the whitespace RFC 8259 calls insignificant
(space, tab, line feed, carriage return between tokens); every token is kept exactly as
written, so the JSON value cannot change:

- numbers keep their text: ``1.0`` stays ``1.0``, ``1e3`` stays ``1e3``, ``-0`` stays ``-0``
  and a 30-digit integer keeps all its digits (re-serializing would turn them into floats or
  drop the sign of zero);
- strings keep their text: non-ASCII characters stay raw, escapes stay the escapes they were
  (``\\u00e9`` is not rewritten as ``é``), spaces inside strings are data;
- key order is kept, and so are duplicate keys, all of them, in order. RFC 8259 leaves their
  meaning to the reader (Python and JavaScript keep the last, others the first or all), so
  dropping any of them could change what the model or a tool reads; keeping the text is the
  only choice that is lossless for every reader.

Only a JSON object or array is compacted. A bare scalar (``42``, ``true``, ``"done"``) is left
as it is: there is nothing inside it to remove, and a tool result like ``42\\n`` is as likely
plain text as JSON, so its surrounding whitespace is not ours to strip.

"Valid JSON" is RFC 8259 JSON text: orjson decides quickly, and what it refuses is asked again
of Python's strict ``json`` parser (orjson refuses some valid texts, e.g. ``1e999`` and lone
surrogate escapes), with ``NaN`` and ``Infinity`` refused. Anything else is left untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

# Control characters can never appear raw in valid JSON, so they are safe placeholders.
_ESCAPED_BACKSLASH = "\x01"
_ESCAPED_QUOTE = "\x02"
_OUTSIDE_JOIN = "\x00"
_DELETE_JSON_WHITESPACE = str.maketrans("", "", " \t\n\r")

_CONTAINER_START = re.compile(r"[ \t\n\r]*[\[{]")
_VALUE_START = re.compile(r"[ \t\n\r]*[\[{\"\-0-9tfn]")

# A fence opens on its own line with ```json (indented by up to three spaces, as in CommonMark)
# and closes at the next line that is only ```. Both patterns start with a literal, so the
# regex engine can skip ahead to candidates instead of trying every position.
_FENCE_OPEN = re.compile(r"```[ \t]*(?i:json)[ \t]*\r?\n")
_FENCE_CLOSE = re.compile(r"\n {0,3}```[ \t]*\r?(?=\n|\Z)")


@dataclass(frozen=True)
class FencedBlock:
    """Where a ```json fenced block lies: [start, end), and its body [body_start, body_end)."""

    start: int
    body_start: int
    body_end: int  # just past the line break that ends the body's last line
    end: int  # just past the closing ```; the line break after it is not part of the block


def fenced_json_blocks(text: str) -> Iterator[FencedBlock]:
    """Find the ```json fenced blocks of `text`, in order; an unclosed fence is not a block."""
    position = 0
    while (opening := _FENCE_OPEN.search(text, position)) is not None:
        line_start = text.rfind("\n", 0, opening.start()) + 1
        indent = text[line_start : opening.start()]
        if len(indent) > 3 or indent.strip(" "):
            position = opening.start() + 3
            continue
        # Search from the opening's own line break, so an empty body is found too.
        closing = _FENCE_CLOSE.search(text, opening.end() - 1)
        if closing is None:
            return
        yield FencedBlock(line_start, opening.end(), closing.start() + 1, closing.end())
        position = closing.end()


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def is_json(text: str) -> bool:
    """Say whether `text` is one RFC 8259 JSON text (any value, surrounding whitespace allowed)."""
    if not _VALUE_START.match(text):
        return False  # most prose and tables: no parser needs to raise for them
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    else:
        return True
    try:
        json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return False
    return True


def strip_insignificant_whitespace(text: str) -> str:
    """Remove whitespace outside strings from `text`, which must already be valid JSON.

    All of it runs in C string methods: escaped backslashes and quotes are set aside so that
    splitting on ``"`` alternates exactly between outside and inside strings.
    """
    protected = text
    if "\\" in protected:
        # Escapes pair up left to right, as str.replace scans: `\\` first, then `\"`.
        protected = protected.replace("\\\\", _ESCAPED_BACKSLASH).replace('\\"', _ESCAPED_QUOTE)
    parts = protected.split('"')
    outside = _OUTSIDE_JOIN.join(parts[::2]).translate(_DELETE_JSON_WHITESPACE)
    parts[::2] = outside.split(_OUTSIDE_JOIN)
    compact = '"'.join(parts)
    if "\\" in text:
        compact = compact.replace(_ESCAPED_QUOTE, '\\"').replace(_ESCAPED_BACKSLASH, "\\\\")
    return compact


def compact_json(text: str) -> str | None:
    """Return `text` without insignificant whitespace if it is a JSON object or array, else None."""
    if not _CONTAINER_START.match(text) or not is_json(text):
        return None
    return strip_insignificant_whitespace(text)


def compact_fenced_json(text: str) -> tuple[str, int]:
    """Compact the body of each ```json fenced block that is a JSON object or array.

    Returns the new text and how many blocks changed; the fences, their line breaks and all
    text around them are kept byte for byte.
    """
    if "```" not in text:
        return text, 0
    pieces = []
    copied = 0
    for block in fenced_json_blocks(text):
        body = text[block.body_start : block.body_end]
        compact = compact_json(body)
        if compact is None:
            continue
        compact += "\r\n" if body.endswith("\r\n") else "\n"
        if compact != body:
            pieces += [text[copied : block.body_start], compact]
            copied = block.body_end
    if not pieces:
        return text, 0
    pieces.append(text[copied:])
    return "".join(pieces), len(pieces) // 2
