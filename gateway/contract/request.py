"""The chat-completions request body, declared once: what a body is validated against
(`gateway.contract.validation`) and what /v1/openapi.json documents.

The shapes are strict, so a client's mistake is refused rather than guessed at: `"100"` is not an
integer, `true` is not a number, and a JSON object is never coerced from anything else. Unknown
fields are ignored (and never forwarded: a model server gets only what was checked) and fields
set to `null` count as absent (many clients send an unset field so). The sampling fields are
OpenAI's.

Messages (`messages.py`), content and content parts, `tool_choice` and `stop` are tagged
unions: a small function reads the tag (a message's role, a part's type, the JSON type of a
value) so a body is checked against the one shape it claims to be, and an error names that
shape's field. The tags are written `kind:name`; a tag is part of a pydantic error's `loc`, and
`errors.py` drops it when it names the field to blame.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    with_config,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from gateway.contract.examples import CHAT_REQUEST_EXAMPLES
from gateway.contract.messages import STRICT, Message, NonEmptyString

MAX_MESSAGES = 512
MAX_TOOLS = 128
MAX_STOP_SEQUENCES = 16
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"
# A tool's name in a request's `tools`, on either API surface.
ToolName = Annotated[
    str,
    Field(
        pattern=TOOL_NAME,
        description="1 to 64 letters, digits, underscores or dashes, different for each tool.",
    ),
]


# Tools the model may call.


@with_config(STRICT)
class FunctionDefinition(TypedDict):
    name: ToolName
    description: NotRequired[
        Annotated[str | None, Field(description="What the function does, for the model.")]
    ]
    parameters: NotRequired[
        Annotated[
            dict[str, Any] | None,
            Field(description="A JSON Schema object describing the arguments."),
        ]
    ]
    strict: NotRequired[
        Annotated[
            bool | None,
            Field(description="Asks a model server that supports it to follow `parameters`."),
        ]
    ]


@with_config(STRICT)
class Tool(TypedDict):
    type: Literal["function"]
    function: FunctionDefinition


def _distinct_names(tools: list[Tool]) -> list[Tool]:
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        name = tool["function"]["name"]
        if name in seen:
            raise PydanticCustomError(
                "tool_name_repeated", "Tool names must differ.", {"index": index, "name": name}
            )
        seen.add(name)
    return tools


@with_config(STRICT)
class ChosenFunction(TypedDict):
    name: str


@with_config(STRICT)
class NamedToolChoice(TypedDict):
    type: Literal["function"]
    function: ChosenFunction


def _tool_choice_kind(value: Any) -> str:
    return "choice:mode" if isinstance(value, str) else "choice:function"


ToolChoice = Annotated[
    Annotated[Literal["none", "auto", "required"], Tag("choice:mode")]
    | Annotated[NamedToolChoice, Tag("choice:function")],
    Discriminator(_tool_choice_kind),
]


@with_config(STRICT)
class StreamOptions(TypedDict):
    include_usage: NotRequired[
        Annotated[
            bool | None,
            Field(description="When streaming, send a chunk with token usage before the end."),
        ]
    ]


def _stop_kind(value: Any) -> str:
    return "stop:list" if isinstance(value, list) else "stop:one"


Stop = Annotated[
    Annotated[NonEmptyString, Tag("stop:one")]
    | Annotated[list[NonEmptyString], Field(max_length=MAX_STOP_SEQUENCES), Tag("stop:list")],
    Discriminator(_stop_kind),
]


@with_config(STRICT)
class ResponseFormat(TypedDict):
    """Passed to a model server as sent, other fields (such as `json_schema`) included."""

    type: Annotated[str, Field(examples=["json_object"])]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "The model name is blank.")
    return value


def _string_or_nothing(value: Any, handler: ValidatorFunctionWrapHandler) -> str | None:
    # A `user` that is not a string is dropped, never refused: it only labels the run, and a
    # client that sends an odd one should still get its answer.
    return value if isinstance(value, str) else None


def _choose_among_tools(
    value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
) -> Any:
    if value is None:
        return None
    tools = info.data.get("tools")  # absent when `tools` was refused: that error comes first
    if tools is None:
        raise PydanticCustomError("needs_tools", "`tool_choice` needs `tools`.")
    choice = handler(value)
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        if all(tool["function"]["name"] != name for tool in tools):
            raise PydanticCustomError(
                "unknown_function", "The function is not in `tools`.", {"name": name}
            )
    return choice


def _needs_tools(value: bool | None, info: ValidationInfo) -> bool | None:
    if value is not None and info.data.get("tools") is None:
        raise PydanticCustomError("needs_tools", "`parallel_tool_calls` needs `tools`.")
    return value


# Sampling numbers, range-checked because they may reach a model server (OpenAI's ranges).
Temperature = Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Penalty = Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)]
OutputCap = Annotated[int, Field(ge=1)]


@with_config(
    ConfigDict(strict=True, extra="ignore", json_schema_extra={"examples": CHAT_REQUEST_EXAMPLES})
)
class ChatCompletionRequest(TypedDict):
    """The body of `POST /v1/chat/completions`."""

    model: NotRequired[
        Annotated[
            Annotated[str, AfterValidator(_not_blank)] | None,
            Field(
                description="The model to use; defaults to the deployment's default model. "
                "`GET /v1/models` lists the others.",
                examples=["Qwen/Qwen2.5-7B-Instruct"],
            ),
        ]
    ]
    messages: Annotated[
        list[Message],
        Field(
            min_length=1,
            max_length=MAX_MESSAGES,
            description="The conversation, oldest message first: 1 to 512 messages.",
        ),
    ]
    # `tools` before `tool_choice` and `parallel_tool_calls`: their checks read it.
    tools: NotRequired[
        Annotated[
            Annotated[list[Tool], Field(max_length=MAX_TOOLS), AfterValidator(_distinct_names)]
            | None,
            Field(description="Functions the model may call, up to 128."),
        ]
    ]
    tool_choice: NotRequired[
        Annotated[
            ToolChoice | None,
            WrapValidator(_choose_among_tools),
            Field(
                description="`auto` (the default with tools) lets the model decide, `none` stops "
                "it calling any, `required` makes it call at least one, and a named function "
                "makes it call that one. Needs `tools`."
            ),
        ]
    ]
    parallel_tool_calls: NotRequired[
        Annotated[
            bool | None,
            AfterValidator(_needs_tools),
            Field(description="Whether the model may make more than one call. Needs `tools`."),
        ]
    ]
    stream: NotRequired[
        Annotated[
            bool | None,
            Field(
                description="Stream the reply as server-sent events. Defaults to `true` (unlike "
                "the OpenAI API), or to `false` when `Accept` asks only for `application/json`."
            ),
        ]
    ]
    stream_options: NotRequired[StreamOptions | None]
    max_tokens: NotRequired[
        Annotated[
            OutputCap | None,
            Field(
                description="The most tokens to generate. Defaults to 1,024, and is lowered when "
                "the context window has less room left."
            ),
        ]
    ]
    max_completion_tokens: NotRequired[
        Annotated[
            OutputCap | None,
            Field(description="OpenAI's newer name for the cap; the smaller of the two wins."),
        ]
    ]
    user: NotRequired[
        Annotated[
            str | None,
            WrapValidator(_string_or_nothing),
            Field(
                description="Names the session when `X-Mortar-Session` isn't sent, and the end "
                "user. A value that is not a string is ignored."
            ),
        ]
    ]
    temperature: NotRequired[Temperature | None]
    top_p: NotRequired[Probability | None]
    stop: NotRequired[
        Annotated[Stop | None, Field(description="A stop sequence, or a list of up to 16.")]
    ]
    presence_penalty: NotRequired[Penalty | None]
    frequency_penalty: NotRequired[Penalty | None]
    seed: NotRequired[int | None]
    response_format: NotRequired[ResponseFormat | None]
    logprobs: NotRequired[bool | None]
    top_logprobs: NotRequired[Annotated[int, Field(ge=0, le=20)] | None]
    n: NotRequired[
        Annotated[
            Annotated[float, Field(ge=1, le=1)] | None,
            Field(description="Must be 1: Mortar returns exactly one choice."),
        ]
    ]


# What validates a body against the request schema.
chat_request_schema: TypeAdapter[ChatCompletionRequest] = TypeAdapter(ChatCompletionRequest)
