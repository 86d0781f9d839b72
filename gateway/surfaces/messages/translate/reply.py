"""A model server's `chat.completion`, translated to an Anthropic Message.

`chat_stop_reason` and `message_usage` are shared with the streamed translation (`stream.py`),
so a reply gets the same `stop_reason` and usage whether it was streamed or not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.surfaces.messages.translate.tool_calls import call_arguments, tool_input, tool_use_id

# OpenAI `finish_reason` → Anthropic `stop_reason`; anything else (a server's own reason,
# Mortar's `stopped`, none at all) ends the turn.
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def chat_stop_reason(
    finish_reason: str | None,
    text: str,
    stop_sequences: Sequence[str],
    *,
    matched_stop: Any = None,
) -> tuple[str, str | None]:
    """The Anthropic `stop_reason` and `stop_sequence` for how a chat reply finished.

    A `stop` finish says only that the model stopped, not whether at its end of turn or at one of
    the request's stop sequences. vLLM says which in its own `stop_reason` field (the stop string,
    or the token id that stopped it), passed here as `matched_stop`: when it is one of
    `stop_sequences`, that sequence it is. Without it, the text is the only witness: a server
    that keeps the stop string in the text (vLLM's `include_stop_str_in_output`) ends the text
    with it, and the longest sequence it ends with is reported. A server that strips it and says
    nothing (llama.cpp, Ollama) leaves no trace, and the turn is reported ended (`end_turn`).
    """
    reason = _STOP_REASONS.get(finish_reason or "", "end_turn")
    if finish_reason != "stop" or not stop_sequences:
        return reason, None
    if isinstance(matched_stop, str) and matched_stop in stop_sequences:
        return "stop_sequence", matched_stop
    ending = [sequence for sequence in stop_sequences if sequence and text.endswith(sequence)]
    if ending:
        return "stop_sequence", max(ending, key=len)
    return reason, None


def completion_to_message(
    completion: Mapping[str, Any], *, message_id: str, stop_sequences: Sequence[str] = ()
) -> dict[str, Any]:
    """Translate a `chat.completion` into the Anthropic Message object."""
    choices = completion.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    thinking = reasoning_text(message)
    if thinking:
        content.append({"type": "thinking", "thinking": thinking, "signature": ""})
    text = content_text(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    calls = message.get("tool_calls") or []
    for position, call in enumerate(calls):
        content.append(
            {
                "type": "tool_use",
                "id": tool_use_id(call.get("id"), fallback=f"{message_id}:{position}"),
                "name": (call.get("function") or {}).get("name", ""),
                "input": tool_input(call_arguments(call)),
            }
        )
    stop_reason, stop_sequence = chat_stop_reason(
        finish_reason_of(choice.get("finish_reason"), has_tool_calls=bool(calls)),
        text,
        stop_sequences,
        matched_stop=choice.get("stop_reason"),
    )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": completion.get("model", ""),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": message_usage(completion.get("usage")),
    }


def finish_reason_of(finish_reason: Any, *, has_tool_calls: bool) -> str | None:
    """The finish reason to translate: `tool_calls` when a `stop` reply called tools.

    vLLM finishes a call forced by a named `tool_choice` with `stop`; an Anthropic client's tool
    loop waits for `tool_use`, so the calls decide.
    """
    if not isinstance(finish_reason, str):
        return None
    if finish_reason == "stop" and has_tool_calls:
        return "tool_calls"
    return finish_reason


def message_usage(usage: Any) -> dict[str, int]:
    """Anthropic usage for an OpenAI `usage` object (zeros when there is none).

    Anthropic's `input_tokens` are the input tokens *not* read from the cache: "Total input
    tokens in a request is the summation of `input_tokens`, `cache_creation_input_tokens`, and
    `cache_read_input_tokens`" (the Messages API reference, `Message.usage`), while OpenAI's
    `prompt_tokens` include `prompt_tokens_details.cached_tokens`. So the cached tokens move from
    the one to the other. Model servers report no cache writes: `cache_creation_input_tokens` 0.
    """
    if not isinstance(usage, Mapping):
        usage = {}
    prompt = _count(usage.get("prompt_tokens"))
    cached = min(cached_tokens(usage), prompt)
    return {
        "input_tokens": prompt - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": _count(usage.get("completion_tokens")),
    }


def cached_tokens(usage: Mapping[str, Any]) -> int:
    details = usage.get("prompt_tokens_details")
    return _count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0


def reasoning_text(message: Mapping[str, Any]) -> str:
    """The reasoning a server sent beside the answer: vLLM's `reasoning_content` (older
    versions) or `reasoning` (newer ones, which may send both with the same text)."""
    for field in ("reasoning_content", "reasoning"):
        value = message.get(field)
        if isinstance(value, str) and value:
            return value
    return ""


def content_text(content: Any) -> str:
    """A message's text: a string, or the `text` of its text parts (a few servers send parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
