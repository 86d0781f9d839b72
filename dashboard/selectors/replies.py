"""A run's reply put back together from its stored chunks, whatever its surface.

A chat completion's chunks carry OpenAI deltas (or one `chat.completion` body); a Messages run's
carry Anthropic's events (or one Message body): text, thinking and tool calls come back the
same way from either, for the run page and the live view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass
class Reply:
    """What the client was sent, put back together from the stored chunks."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str = ""
    error: dict[str, Any] | None = None


def reply_of(chunks: list[bytes]) -> Reply:
    """Join the deltas of an SSE stream, or read the message of a JSON body."""
    reply = Reply()
    calls: dict[int, dict[str, Any]] = {}
    for data in chunks:
        for payload in _payloads(data):
            if "error" in payload:
                reply.error = payload["error"]
            elif isinstance(payload.get("type"), str):
                _add_anthropic(reply, calls, payload)
            else:
                _add_chat(reply, calls, payload)
    if calls:
        reply.tool_calls = [calls[index] for index in sorted(calls)]
    return reply


def _add_chat(reply: Reply, calls: dict[int, dict[str, Any]], payload: dict[str, Any]) -> None:
    for choice in payload.get("choices") or ():
        message = choice.get("delta") or choice.get("message") or {}
        reply.content += message.get("content") or ""
        reply.reasoning += message.get("reasoning_content") or message.get("reasoning") or ""
        for call in message.get("tool_calls") or ():
            _merge_tool_call(calls, call)
        if choice.get("finish_reason"):
            reply.finish_reason = choice["finish_reason"]


def _add_anthropic(reply: Reply, calls: dict[int, dict[str, Any]], payload: dict[str, Any]) -> None:
    """A Message body, or one of Anthropic's stream events (ping and the bookends add nothing)."""
    kind = payload["type"]
    if kind == "message":
        for index, block in enumerate(payload.get("content") or ()):
            _add_block(reply, calls, index, block)
        reply.finish_reason = payload.get("stop_reason") or reply.finish_reason
    elif kind == "content_block_start":
        _add_block(reply, calls, payload.get("index", 0), payload.get("content_block") or {})
    elif kind == "content_block_delta":
        delta = payload.get("delta") or {}
        reply.content += delta.get("text") or ""
        reply.reasoning += delta.get("thinking") or ""
        if delta.get("type") == "input_json_delta":
            call = calls.setdefault(payload.get("index", 0), _call())
            call["arguments"] += delta.get("partial_json") or ""
    elif kind == "message_delta":
        reply.finish_reason = (payload.get("delta") or {}).get("stop_reason") or ""


def _add_block(
    reply: Reply, calls: dict[int, dict[str, Any]], index: int, block: dict[str, Any]
) -> None:
    reply.content += block.get("text") or ""
    reply.reasoning += block.get("thinking") or ""
    if block.get("type") == "tool_use":
        call = calls.setdefault(index, _call())
        call["id"], call["name"] = block.get("id") or "", block.get("name") or ""
        if block.get("input"):  # a Message's whole input; a stream's comes in deltas
            call["arguments"] = orjson.dumps(block["input"]).decode()


def _call() -> dict[str, Any]:
    return {"id": "", "name": "", "arguments": ""}


def _payloads(data: bytes) -> list[dict[str, Any]]:
    if data.lstrip().startswith(b"{"):
        return _json_objects(data)
    found = []
    for line in data.splitlines():
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            found += _json_objects(line[5:])
    return found


def _json_objects(raw: bytes) -> list[dict[str, Any]]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    return [value] if isinstance(value, dict) else []


def _merge_tool_call(calls: dict[int, dict[str, Any]], piece: dict[str, Any]) -> None:
    index = piece.get("index", len(calls))
    call = calls.setdefault(index, _call())
    call["id"] = piece.get("id") or call["id"]
    function = piece.get("function") or {}
    call["name"] += function.get("name") or ""
    call["arguments"] += function.get("arguments") or ""
