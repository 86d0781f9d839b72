"""A chat completion's reply as the client reads it: one JSON body, or a stream's events (the
relay, `gateway.relay`, sends what this renders, and records each event as one chunk)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.contract.surface import RenderingFor
from gateway.generation.reply import Delta, Generation
from gateway.surfaces.chat.chunks import DONE, ChunkEncoder, error_event

# SSE comment while the model server is quiet (every `MORTAR_PING_SECONDS`, 10 by default).
CHAT_PING = b": ping\n\n"


# The role chunk: Mortar's, and OpenAI's own (which also says there is no refusal).
ROLE_DELTA: dict[str, Any] = {"role": "assistant"}
OPENAI_ROLE_DELTA: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}


class ChatRendering:
    """OpenAI's chat completions: the role chunk, a chunk per delta, the finish chunk without
    `delta`, the usage chunk when asked for, `[DONE]`. A stopped stream sends no finish chunk
    (the model did not finish); the usage chunk and `[DONE]` still follow.

    For an organization with `finish_chunk_delta`, the reply takes the shape OpenAI's published
    schema gives it: `"delta": {}` on the finish chunk, and `refusal: null` on the message of a
    JSON body (a field that schema requires) and on the role chunk's delta (as OpenAI sends it).
    Mortar's model servers never refuse in that field, so it is always null."""

    ping = CHAT_PING

    def __init__(
        self, encoder: ChunkEncoder, *, include_usage: bool, finish_chunk_delta: bool = False
    ) -> None:
        self.encoder = encoder
        self.include_usage = include_usage
        # Chosen once per completion, so the default stream pays nothing for the option.
        self._openai_shape = finish_chunk_delta
        self._finish = encoder.finish_with_delta if finish_chunk_delta else encoder.finish
        self._role = OPENAI_ROLE_DELTA if finish_chunk_delta else ROLE_DELTA

    def body(self, generation: Generation, usage: dict[str, Any]) -> bytes:
        message = generation.message()
        if self._openai_shape:
            role, content = message.pop("role"), message.pop("content")
            message = {"role": role, "content": content, "refusal": None, **message}
        return self.encoder.completion(
            message=message, finish_reason=generation.finish_reason, usage=usage
        )

    def opening(self) -> list[bytes]:
        return [self.encoder.delta(self._role)]

    def delta(self, delta: Delta) -> list[bytes]:
        return [self.encoder.delta(delta)]

    def closing(
        self, generation: Generation, usage: dict[str, Any], *, stopped: bool
    ) -> list[bytes]:
        events = [] if stopped else [self._finish(generation.finish_reason)]
        if self.include_usage:
            events.append(self.encoder.usage(usage))
        events.append(DONE)
        return events

    def failure(self, error: dict[str, Any]) -> bytes:
        return error_event(error)


def chat_rendering(planned: RenderingFor) -> ChatRendering:
    """The rendering of one planned chat completion."""
    encoder = ChunkEncoder(
        completion_id=planned.run_id, created=planned.created, model=planned.model
    )
    return ChatRendering(
        encoder,
        include_usage=planned.chat.include_usage,
        finish_chunk_delta=planned.finish_chunk_delta,
    )


def usage_of_completion(body: bytes) -> dict[str, Any] | None:
    """The usage a `chat.completion` body reports (a leader's answer shared by dedupe)."""
    try:
        usage = orjson.loads(body).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return usage if isinstance(usage, dict) else None
