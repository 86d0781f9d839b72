"""Encode the bytes Mortar sends: SSE chunk events, the completion object, error events.

Key order follows OpenAI's examples (id, object, created, model, choices, usage), compact
JSON. The constant head of every chunk is encoded once per completion.
"""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


class ChunkEncoder:
    """Builds the events of one completion's stream, and its non-streaming body."""

    def __init__(self, *, completion_id: str, created: int, model: str):
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self._head = (
            b'data: {"id":'
            + orjson.dumps(completion_id)
            + b',"object":"chat.completion.chunk","created":'
            + str(created).encode()
            + b',"model":'
            + orjson.dumps(model)
            + b',"choices":'
        )

    def delta(self, delta: dict[str, Any]) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return self._head + orjson.dumps([choice]) + b"}\n\n"

    def finish(self, finish_reason: str) -> bytes:
        choice = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
        return self._head + orjson.dumps([choice]) + b"}\n\n"

    def finish_with_delta(self, finish_reason: str) -> bytes:
        """The finish chunk with `"delta": {}`, for organizations that opt in to it
        (`Organization.finish_chunk_delta`): the contract's finish chunk has none."""
        choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish_reason}
        return self._head + orjson.dumps([choice]) + b"}\n\n"

    def usage(self, usage: dict[str, Any]) -> bytes:
        return self._head + b'[],"usage":' + orjson.dumps(usage) + b"}\n\n"

    def completion(
        self, *, message: dict[str, Any], finish_reason: str, usage: dict[str, Any]
    ) -> bytes:
        return orjson.dumps(
            {
                "id": self.completion_id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
                "usage": usage,
            }
        )


def error_event(envelope: dict[str, Any]) -> bytes:
    """An error after the stream started: one event, then the stream closes."""
    return b"data: " + orjson.dumps(envelope) + b"\n\n"
