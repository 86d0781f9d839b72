"""The Messages surface's replies: the Message object, and Anthropic's stream of events.

Both come from the reply as the relay builds it for every surface (OpenAI-shaped deltas and
usage), through the translation (`gateway.surfaces.messages.translate`): a JSON reply is the
`chat.completion` Mortar would have answered, translated whole; a stream feeds each delta to a
`MessageStream` and sends every event it makes, each recorded as one chunk exactly as sent.
While the model server is quiet the stream sends Anthropic's `event: ping`; an error after the
start is one `event: error` with Anthropic's error body.

A stopped generation ends as the translation ends any other reason it does not know
(`end_turn`): Anthropic's `stop_reason` has no word for it, and the run records it as stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.generation.reply import Delta, Generation
from gateway.surfaces.messages.translate import MessageStream, completion_to_message, encode_event

# Exactly what Anthropic's API sends while the model is quiet.
PING = b'event: ping\ndata: {"type": "ping"}\n\n'


def _encoded(events: list[tuple[str, dict[str, Any]]]) -> list[bytes]:
    return [encode_event(name, data) for name, data in events]


class MessagesRendering:
    """One reply of the Messages route (`msg_…`), rendered from the relay's OpenAI shapes."""

    ping = PING

    def __init__(
        self,
        *,
        message_id: str,
        created: int,
        model: str,
        prompt_tokens: int,
        stop_sequences: Sequence[str],
    ) -> None:
        self.message_id = message_id
        self.created = created
        self.model = model
        self.stop_sequences = tuple(stop_sequences)
        # `message_start` carries Mortar's count of the prompt; the model server's own counts,
        # cached tokens included, follow in `message_delta` once it reports them.
        self._stream = MessageStream(
            message_id=message_id,
            model=model,
            input_tokens=prompt_tokens,
            stop_sequences=self.stop_sequences,
        )

    def body(self, generation: Generation, usage: dict[str, Any]) -> bytes:
        completion = {
            "id": self.message_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": generation.message(),
                    "finish_reason": generation.finish_reason,
                    "stop_reason": generation.matched_stop,
                }
            ],
            "usage": usage,
        }
        message = completion_to_message(
            completion, message_id=self.message_id, stop_sequences=self.stop_sequences
        )
        return orjson.dumps(message)

    def opening(self) -> list[bytes]:
        return _encoded(self._stream.start())

    def delta(self, delta: Delta) -> list[bytes]:
        return _encoded(self._stream.feed({"choices": [{"index": 0, "delta": delta}]}))

    def closing(
        self, generation: Generation, usage: dict[str, Any], *, stopped: bool
    ) -> list[bytes]:
        ending = {
            "index": 0,
            "delta": {},
            "finish_reason": generation.finish_reason,
            "stop_reason": generation.matched_stop,
        }
        events = self._stream.feed({"choices": [ending]})
        # The relay's usage: the model server's own counts, or Mortar's estimate.
        return _encoded(events + self._stream.finish(usage=usage))

    def failure(self, error: dict[str, Any]) -> bytes:
        return encode_event("error", error)


def chat_usage_of_message(body: bytes) -> dict[str, Any] | None:
    """The OpenAI-shaped usage behind a Message body (a leader's answer shared by dedupe): the
    inverse of the translation's, cached tokens back inside the prompt's."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    usage = message.get("usage") if isinstance(message, dict) else None
    if not isinstance(usage, dict):
        return None
    cached = _count(usage.get("cache_read_input_tokens"))
    prompt = _count(usage.get("input_tokens")) + cached
    prompt += _count(usage.get("cache_creation_input_tokens"))
    completion = _count(usage.get("output_tokens"))
    found: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        found["prompt_tokens_details"] = {"cached_tokens": cached}
    return found


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
