"""What the Messages route answers, declared for /v1/openapi.json.

The replies are rendered by `rendering.py` through the translation, in exactly these shapes
(Anthropic's "Messages" and "Streaming Messages" pages).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.surfaces.messages.examples import STREAM_EVENTS, TOKEN_COUNT

MESSAGE_ID = r"^msg_[0-9a-f]{24}$"


class MessageUsage(BaseModel):
    input_tokens: int = Field(
        description="Prompt tokens not read from the model server's cache (chat-template "
        "framing included)."
    )
    cache_creation_input_tokens: int = Field(description="Always 0: model servers report none.")
    cache_read_input_tokens: int = Field(
        description="Prompt tokens the model server read from its prefix cache (its "
        "`cached_tokens`)."
    )
    output_tokens: int = Field(description="Tokens in the reply.")


class TextContent(BaseModel):
    type: Literal["text"]
    text: str


class ThinkingContent(BaseModel):
    """The model server's reasoning (`reasoning_content`), before the answer."""

    type: Literal["thinking"]
    thinking: str
    signature: str = Field(description="Empty: model servers sign nothing.")


class ToolUseContent(BaseModel):
    type: Literal["tool_use"]
    id: str = Field(description="The call's ID (`toolu_…`), for the `tool_result` answering it.")
    name: str
    input: dict[str, Any] = Field(description="The call's arguments, parsed.")


ContentBlock = Annotated[
    TextContent | ThinkingContent | ToolUseContent, Field(discriminator="type")
]


class Message(BaseModel):
    """The reply to a request without `stream: true`."""

    id: str = Field(pattern=MESSAGE_ID, description="The message's (and run's) ID.")
    type: Literal["message"]
    role: Literal["assistant"]
    model: str = Field(description="The model that generated the reply.")
    content: list[ContentBlock]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None = Field(
        description="Why the reply ended (a generation stopped with `POST "
        "/v1/generations/{id}/stop` ends with `end_turn`)."
    )
    stop_sequence: str | None = Field(description="The stop sequence that ended it, if one did.")
    usage: MessageUsage


class StreamEventData(BaseModel):
    """One event's `data`: its `type` repeats the event's name (Anthropic's stream events)."""

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"examples": [data for _, data in STREAM_EVENTS]}
    )
    type: Literal[
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    ]


class TokenCount(BaseModel):
    """What `POST /v1/messages/count_tokens` answers."""

    model_config = ConfigDict(json_schema_extra={"examples": [TOKEN_COUNT]})
    input_tokens: int = Field(
        description="The prompt's tokens, as `POST /v1/messages` bills them for this request."
    )
