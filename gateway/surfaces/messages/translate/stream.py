"""A model server's `chat.completion.chunk`s, translated to Anthropic's stream events.

The events follow Anthropic's "Streaming Messages" page: `message_start` (the Message with no
content yet), then for each content block `content_block_start`, its `content_block_delta`s and
`content_block_stop`, with increasing `index`; then `message_delta` (`stop_reason`,
`stop_sequence`, cumulative `usage`) and `message_stop`. Pings and errors are the route's.

Blocks come in the order the reply's parts arrive, a new block whenever the kind changes
(reasoning → `thinking`, content → `text`). Tool calls are different: each becomes its own
`tool_use` block, emitted whole when the reply ends, after the text (see `MessageStream.finish`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.surfaces.messages.translate.reply import (
    chat_stop_reason,
    content_text,
    finish_reason_of,
    message_usage,
    reasoning_text,
)
from gateway.surfaces.messages.translate.tool_calls import dump_json, tool_input, tool_use_id

Event = tuple[str, dict[str, Any]]

# Anthropic's own `message_start` reports one output token before any content (the docs'
# example stream); the final count arrives in `message_delta`, which replaces it.
START_OUTPUT_TOKENS = 1


def encode_event(name: str, data: Mapping[str, Any]) -> bytes:
    """One server-sent event, as Anthropic writes them: `event:` and compact JSON `data:`."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


@dataclass
class _ToolCall:
    """A tool call being received: pieces of its arguments arrive over many chunks."""

    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class MessageStream:
    """OpenAI chat.completion.chunk dicts in → Anthropic stream events out."""

    def __init__(
        self,
        *,
        message_id: str,
        model: str,
        input_tokens: int,
        cache_read_input_tokens: int = 0,
        stop_sequences: Sequence[str] = (),
    ) -> None:
        """`input_tokens` and `cache_read_input_tokens` as Anthropic counts them: the first
        excludes the second. They go out in `message_start`; the server's own counts, when its
        last chunk reports usage, go out in `message_delta`."""
        self.message_id = message_id
        self.model = model
        self.input_tokens = input_tokens
        self.cache_read_input_tokens = cache_read_input_tokens
        self.stop_sequences = tuple(stop_sequences)
        self._next_index = 0
        self._open: str | None = None  # the kind of the block being streamed, if any
        self._calls: dict[Any, _ToolCall] = {}
        self._last_call_key: Any = None
        # The end of the text so far, long enough to tell whether it ends with a stop sequence.
        self._tail = ""
        self._tail_length = max((len(s) for s in self.stop_sequences), default=0)
        self._finish_reason: str | None = None
        self._matched_stop: Any = None
        self._usage: Mapping[str, Any] | None = None
        self._finished = False

    def start(self) -> list[Event]:
        """The `message_start` event."""
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": self.cache_read_input_tokens,
                "output_tokens": START_OUTPUT_TOKENS,
            },
        }
        return [("message_start", {"type": "message_start", "message": message})]

    def feed(self, chunk: Mapping[str, Any]) -> list[Event]:
        """The events one chunk makes (often none: a role chunk, a piece of a tool call)."""
        if self._finished:
            return []
        if isinstance(chunk.get("usage"), Mapping):
            self._usage = chunk["usage"]
        events: list[Event] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # Mortar asks for one choice; a server's others are not this message
            delta = choice.get("delta") or {}
            thinking = reasoning_text(delta)
            if thinking:
                events += self._delta("thinking", {"type": "thinking_delta", "thinking": thinking})
            text = content_text(delta.get("content"))
            if text:
                events += self._delta("text", {"type": "text_delta", "text": text})
                self._remember_text(text)
            for piece in delta.get("tool_calls") or ():
                self._receive_call_piece(piece)
            if choice.get("finish_reason") is not None:
                self._finish_reason = choice["finish_reason"]
                self._matched_stop = choice.get("stop_reason")
        return events

    def finish(
        self,
        *,
        output_tokens: int | None = None,
        usage: Mapping[str, Any] | None = None,
        finish_reason: str | None = None,
    ) -> list[Event]:
        """Close the open block, send the tool calls, then `message_delta` and `message_stop`.

        Usage is the server's (its last chunk's `usage`) unless the caller knows better: `usage`
        (an OpenAI usage object, say Mortar's estimate) replaces it, and `output_tokens` replaces
        its output count. `finish_reason` replaces the server's (say, when Mortar cut the reply).
        """
        if self._finished:
            return []
        self._finished = True
        events = self._close_open_block()
        # Tool calls go out whole, each as one block with its `input` in one `input_json_delta`,
        # once the reply is over. Their arguments must be complete first: an Anthropic client
        # parses each `partial_json` prefix as JSON, and a model's broken arguments forwarded piece
        # by piece would break the client's stream; whole, they get the same `input` as the JSON
        # reply (`tool_input`). A call usually ends the reply, so little waits; and it puts the
        # blocks in the JSON reply's order whatever order the pieces came in.
        for position, call in enumerate(self._calls.values()):
            events += self._tool_use_block(position, call)
        reason = finish_reason if finish_reason is not None else self._finish_reason
        stop_reason, stop_sequence = chat_stop_reason(
            finish_reason_of(reason, has_tool_calls=bool(self._calls)),
            self._tail,
            self.stop_sequences,
            matched_stop=self._matched_stop if finish_reason is None else None,
        )
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": self._final_usage(output_tokens, usage),
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    def _final_usage(
        self, output_tokens: int | None, usage: Mapping[str, Any] | None
    ) -> dict[str, int]:
        known = usage if usage is not None else self._usage
        # Counts in `message_delta` are cumulative and replace `message_start`'s: with the
        # server's counts known, its input and cache counts go too (how a streamed reply gets
        # `cache_read_input_tokens`, learnt only at the end); otherwise only the output count.
        final = message_usage(known) if known is not None else {"output_tokens": 0}
        if output_tokens is not None:
            final["output_tokens"] = output_tokens
        return final

    def _delta(self, kind: str, delta: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        if self._open != kind:
            events += self._close_open_block()
            block = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "thinking"
                else {"type": "text", "text": ""}
            )
            events.append(self._block_start(block))
            self._open = kind
        index = self._next_index - 1
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        )
        return events

    def _block_start(self, block: dict[str, Any]) -> Event:
        index = self._next_index
        self._next_index += 1
        return (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )

    def _close_open_block(self) -> list[Event]:
        if self._open is None:
            return []
        self._open = None
        index = self._next_index - 1
        return [("content_block_stop", {"type": "content_block_stop", "index": index})]

    def _tool_use_block(self, position: int, call: _ToolCall) -> list[Event]:
        block = {
            "type": "tool_use",
            "id": tool_use_id(call.id, fallback=f"{self.message_id}:{position}"),
            "name": call.name,
            "input": {},
        }
        start = self._block_start(block)
        index = self._next_index - 1
        arguments = "".join(call.arguments) if call.arguments else None
        partial_json = dump_json(tool_input(arguments))
        delta = {"type": "input_json_delta", "partial_json": partial_json}
        return [
            start,
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]

    def _receive_call_piece(self, piece: Mapping[str, Any]) -> None:
        key = piece.get("index")
        if key is None:
            # Servers that send each call whole (some Ollama versions) may leave out `index`:
            # a new id is a new call, a piece without one continues the last.
            call_id = piece.get("id")
            if call_id is None or call_id == getattr(
                self._calls.get(self._last_call_key), "id", None
            ):
                key = self._last_call_key if self._last_call_key is not None else ("call", 0)
            else:
                key = ("call", len(self._calls))
        call = self._calls.setdefault(key, _ToolCall())
        self._last_call_key = key
        if isinstance(piece.get("id"), str) and call.id is None:
            call.id = piece["id"]
        function = piece.get("function") or {}
        if isinstance(function.get("name"), str) and not call.name:
            call.name = function["name"]
        if isinstance(function.get("arguments"), str):
            call.arguments.append(function["arguments"])

    def _remember_text(self, text: str) -> None:
        if self._tail_length:
            self._tail = (self._tail + text)[-self._tail_length :]
