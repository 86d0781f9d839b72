"""What the gateway's operations answer, declared for /v1/openapi.json.

The chat surface encodes its bytes itself (`gateway.surfaces.chat.chunks`), in exactly these
shapes (OpenAI's chat completion object and chunk object). Where a model server's own fields
pass through (usage details, delta fields), the objects allow more fields than are listed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.contract.examples import CHUNK_EXAMPLES, MODEL_LIST, NOT_RUNNING, STOPPED

COMPLETION_ID = r"^chatcmpl-[0-9a-f]{24}$"


class Usage(BaseModel):
    """Token counts; a model server's details (`prompt_tokens_details`, …) pass through."""

    model_config = ConfigDict(extra="allow")
    prompt_tokens: int = Field(description="Tokens in the prompt, chat-template framing included.")
    completion_tokens: int = Field(description="Tokens in the reply.")
    total_tokens: int = Field(description="The sum of the two.")


class ReplyFunction(BaseModel):
    name: str = Field(description="The function to call.")
    arguments: str = Field(description="Its arguments as JSON text: parse them before trusting.")


class ReplyToolCall(BaseModel):
    id: str = Field(description="The call's ID, for the `tool_call_id` of the message answering.")
    type: Literal["function"]
    function: ReplyFunction


class ReplyMessage(BaseModel):
    """The reply; a model server's reasoning fields (`reasoning_content`, …) pass through."""

    model_config = ConfigDict(extra="allow")
    role: Literal["assistant"]
    content: str | None = Field(description="The reply, or null when it only calls tools.")
    refusal: None = Field(
        default=None,
        description="Always null, and present only for an organization with "
        "`finish_chunk_delta` (OpenAI's exact shape).",
    )
    tool_calls: list[ReplyToolCall] | None = Field(
        default=None, description="Present when the model calls tools: the calls, in order."
    )


class Choice(BaseModel):
    index: Literal[0]
    message: ReplyMessage
    logprobs: None = Field(description="Always null: log probabilities aren't returned.")
    finish_reason: str = Field(
        description="`stop`, `tool_calls` or `length` (a model server's own reason passes "
        "through; `stopped` for a generation stopped with `POST /v1/generations/{id}/stop`).",
        examples=["stop"],
    )


class ChatCompletion(BaseModel):
    """The reply to a request with `stream: false`."""

    id: str = Field(pattern=COMPLETION_ID, description="The completion's (and run's) ID.")
    object: Literal["chat.completion"]
    created: int = Field(description="When the request was accepted, in Unix seconds.")
    model: str = Field(description="The model that generated the reply.")
    choices: list[Choice] = Field(min_length=1, max_length=1)
    usage: Usage


class ToolCallPiece(BaseModel):
    """A piece of a tool call: the first carries its id, type and name."""

    model_config = ConfigDict(extra="allow")
    index: int = Field(description="Which call the piece belongs to, counting from 0.")
    id: str | None = None
    type: Literal["function"] | None = None
    function: dict[str, str] | None = Field(
        default=None, description="`name` in the first piece; the next piece of `arguments`."
    )


class Delta(BaseModel):
    """What the chunk adds to the reply; a model server's own delta fields pass through."""

    model_config = ConfigDict(extra="allow")
    role: Literal["assistant"] | None = Field(default=None, description="On the first chunk.")
    content: str | None = Field(default=None, description="The next piece of the reply.")
    refusal: None = Field(
        default=None,
        description="Null on the role chunk of an organization with `finish_chunk_delta` "
        "(OpenAI's exact shape); absent otherwise.",
    )
    tool_calls: list[ToolCallPiece] | None = None


class ChunkChoice(BaseModel):
    index: Literal[0]
    delta: Delta | None = Field(
        default=None,
        description="Absent on the finish chunk (`{}` for an organization with "
        "`finish_chunk_delta`).",
    )
    logprobs: None
    finish_reason: str | None = Field(description="Null except on the finish chunk.")


class ChatCompletionChunk(BaseModel):
    """One event of a streamed reply (`data: {…}`); the stream ends with `data: [DONE]`."""

    model_config = ConfigDict(json_schema_extra={"examples": CHUNK_EXAMPLES})
    id: str = Field(pattern=COMPLETION_ID, description="The completion's ID, on every chunk.")
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice] = Field(
        max_length=1, description="One choice, or none on the usage chunk."
    )
    usage: Usage | None = Field(default=None, description="Only on the usage chunk.")


class CatalogEntry(BaseModel):
    id: str = Field(examples=["Qwen/Qwen2.5-7B-Instruct"])
    object: Literal["model"]
    created: int = Field(description="When the model joined the catalog, in Unix seconds.")
    owned_by: str
    context_window: int = Field(description="Tokens of prompt, reply and template overhead.")
    vision: bool = Field(description="Whether the model reads images.")
    deployed: bool = Field(description="Whether a deployment serves the model now.")


class ModelList(BaseModel):
    """The model catalog."""

    model_config = ConfigDict(json_schema_extra={"examples": [MODEL_LIST]})
    object: Literal["list"]
    data: list[CatalogEntry]


class StopResult(BaseModel):
    """The same body for 200 (stopped) and 404 (no such generation running)."""

    model_config = ConfigDict(json_schema_extra={"examples": [STOPPED, NOT_RUNNING]})
    stopped: bool = Field(description="Whether a running generation was stopped.")
    id: str = Field(description="The ID you sent.")
