"""What a model produced for one request, filled in while it streams."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

# One streamed delta of the reply (`choices[0].delta`), and the model's deltas as they come: a
# list per batch that arrived together (never empty).
Delta = dict[str, Any]
Deltas = AsyncGenerator[list[Delta], None]

# Delta fields that carry reasoning text, as vLLM and others name them: passed
# through as received, and stored with the run.
REASONING_FIELDS = ("reasoning", "reasoning_content")


@dataclass
class Generation:
    """The reply so far and how it ended; the relay reads it for usage and the final object."""

    finish_reason: str = "stop"
    completion_tokens: int = 0  # Mortar's own count, once counted
    # Counts the reply when Mortar's own count is needed (the model server reported no usage,
    # or Mortar cut it): a model server that reports usage saves Mortar tokenizing the reply.
    count_later: Callable[[str], int] | None = None
    content: str | None = None
    reasoning: dict[str, str] = field(default_factory=dict)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    upstream_usage: dict[str, Any] | None = None
    cut_by_mortar: bool = False  # Mortar stopped a model server that ran on past max_tokens
    # A model server had the request and failed before its first byte (an error status, a
    # timeout): it consumed the prompt, which the run is charged for. Not set when none could
    # be reached.
    prompt_consumed: bool = False
    # What stopped a `stop` reply, when the model server says (vLLM's `stop_reason`: the stop
    # string, or the token id): how the Messages surface tells `stop_sequence` from `end_turn`.
    matched_stop: str | int | None = None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [self.calls[index] for index in sorted(self.calls)]

    def add_delta(self, delta: dict[str, Any]) -> None:
        """Fold one streamed delta into the reply."""
        text = delta.get("content")
        if isinstance(text, str) and text:
            self.content = (self.content or "") + text
        for name in REASONING_FIELDS:
            piece = delta.get(name)
            if isinstance(piece, str):
                self.reasoning[name] = self.reasoning.get(name, "") + piece
        for piece in delta.get("tool_calls") or ():
            if isinstance(piece, dict):
                self._add_tool_call_piece(piece)

    def _add_tool_call_piece(self, piece: dict[str, Any]) -> None:
        index = piece.get("index", 0) if isinstance(piece.get("index"), int) else 0
        call = self.calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if isinstance(piece.get("id"), str):
            call["id"] = piece["id"]
        if isinstance(piece.get("type"), str):
            call["type"] = piece["type"]
        function = piece.get("function")
        if isinstance(function, dict):
            for key in ("name", "arguments"):
                if isinstance(function.get(key), str):
                    call["function"][key] += function[key]

    def own_completion_tokens(self) -> int:
        if self.count_later is not None:
            self.completion_tokens = self.count_later(self.text())
            self.count_later = None
        return self.completion_tokens

    def searchable_text(self) -> str:
        """The reply as the dashboard's search reads it: its text, reasoning and tool calls,
        one piece a line (so words of two pieces never run together)."""
        if not self.reasoning and not self.calls:  # the usual reply: its text as it is
            return self.content or ""
        parts = [self.content or "", *self.reasoning.values()]
        for call in self.calls.values():
            parts += (call["function"]["name"], call["function"]["arguments"])
        return "\n".join(part for part in parts if part)

    def text(self) -> str:
        """Everything generated as text (reply, reasoning, tool calls), for counting tokens."""
        parts = [self.content or "", *self.reasoning.values()]
        for call in self.calls.values():
            parts += (call["function"]["name"], call["function"]["arguments"])
        return "".join(parts)

    def message(self) -> dict[str, Any]:
        """The `choices[0].message` of a non-streaming reply."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        message.update(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.tool_calls
        return message
