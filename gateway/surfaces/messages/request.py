"""The Messages request body (`POST /v1/messages`), declared once: what a body is validated
against (`validation.py`) and what /v1/openapi.json documents.

Anthropic's request shape, strict as the chat contract is (`"100"` is not an integer, nothing
is coerced: a client's mistake is refused rather than guessed at). Unknown fields are ignored and
fields set to `null` count as absent. Roles, content blocks, tool choices and thinking are
tagged unions: a small function reads the tag (`kind:name`, dropped from an error's field path
by the refusal table) so a body is checked against the one shape it claims to be.

Each role takes the blocks it may carry: a user message text, images and tool results, an
assistant message text, tool calls and the thinking blocks a reply of Mortar's holds (an SDK
sends a reply's content back as it was). Images are base64 sources of the four media types
Mortar reads; Mortar never fetches a URL a client names.
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

from gateway.contract.messages import STRICT, NonEmptyString

# The same bounds as chat completions: the request becomes a chat request.
from gateway.contract.request import (
    MAX_MESSAGES,
    MAX_STOP_SEQUENCES,
    MAX_TOOLS,
    TOOL_NAME,
    ToolName,
)
from gateway.surfaces.messages.examples import MESSAGES_REQUEST_EXAMPLES

# Anthropic's rule for a thinking budget: at least 1,024 tokens, and less than `max_tokens`.
MIN_THINKING_BUDGET = 1024


def _tag_of_type(kind: str) -> Any:
    """A discriminator reading an object's `type` as the tag `kind:<type>`."""

    def tag(value: Any) -> str | None:
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            return f"{kind}:{value['type']}"
        return None

    return Discriminator(tag)


def _text_or_blocks(value: Any) -> str | None:
    if isinstance(value, str):
        return "content:text"
    if isinstance(value, list):
        return "content:blocks"
    return None


# Content blocks.


@with_config(STRICT)
class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


@with_config(STRICT)
class Base64ImageSource(TypedDict):
    type: Annotated[
        Literal["base64"],
        Field(description="Only inline data: Mortar never fetches an image URL."),
    ]
    media_type: Literal["image/png", "image/jpeg", "image/webp", "image/gif"]
    data: Annotated[str, Field(description="The image, base64-encoded.")]


@with_config(STRICT)
class ImageBlock(TypedDict):
    """An image, on a user message, for a model that reads images (`vision`)."""

    type: Literal["image"]
    source: Base64ImageSource


@with_config(STRICT)
class ToolUseBlock(TypedDict):
    """A tool call the assistant made, as a reply of Mortar's returned it."""

    type: Literal["tool_use"]
    id: Annotated[NonEmptyString, Field(description="The call's ID (`toolu_…`).")]
    name: Annotated[str, Field(pattern=TOOL_NAME)]
    input: Annotated[dict[str, Any], Field(description="The call's arguments.")]


@with_config(STRICT)
class ThinkingBlock(TypedDict):
    """Reasoning of an earlier reply, sent back with it (not shown to the model again)."""

    type: Literal["thinking"]
    thinking: str
    signature: NotRequired[str | None]


@with_config(STRICT)
class RedactedThinkingBlock(TypedDict):
    type: Literal["redacted_thinking"]
    data: str


ToolResultContent = Annotated[
    Annotated[str, Tag("content:text")] | Annotated[list[TextBlock], Tag("content:blocks")],
    Discriminator(_text_or_blocks),
]


@with_config(STRICT)
class ToolResultBlock(TypedDict):
    """What a tool returned, answering the assistant's call `tool_use_id`."""

    type: Literal["tool_result"]
    tool_use_id: Annotated[NonEmptyString, Field(description="The ID of the call answered.")]
    content: NotRequired[
        Annotated[
            ToolResultContent | None,
            Field(description="A string, or text blocks (joined with line breaks)."),
        ]
    ]
    is_error: NotRequired[Annotated[bool | None, Field(description="Whether the tool failed.")]]


UserBlock = Annotated[
    Annotated[TextBlock, Tag("block:text")]
    | Annotated[ImageBlock, Tag("block:image")]
    | Annotated[ToolResultBlock, Tag("block:tool_result")],
    _tag_of_type("block"),
]
AssistantBlock = Annotated[
    Annotated[TextBlock, Tag("block:text")]
    | Annotated[ToolUseBlock, Tag("block:tool_use")]
    | Annotated[ThinkingBlock, Tag("block:thinking")]
    | Annotated[RedactedThinkingBlock, Tag("block:redacted_thinking")],
    _tag_of_type("block"),
]


# Messages, one shape per role.


@with_config(STRICT)
class UserTurn(TypedDict):
    role: Literal["user"]
    content: Annotated[
        Annotated[str, Tag("content:text")] | Annotated[list[UserBlock], Tag("content:blocks")],
        Discriminator(_text_or_blocks),
        Field(description="A string, or `text`, `image` and `tool_result` blocks."),
    ]


@with_config(STRICT)
class AssistantTurn(TypedDict):
    role: Literal["assistant"]
    content: Annotated[
        Annotated[str, Tag("content:text")]
        | Annotated[list[AssistantBlock], Tag("content:blocks")],
        Discriminator(_text_or_blocks),
        Field(description="A string, or `text`, `tool_use` and `thinking` blocks."),
    ]


def _role_kind(value: Any) -> str | None:
    role = value.get("role") if isinstance(value, dict) else None
    return f"message:{role}" if isinstance(role, str) else None


InputMessage = Annotated[
    Annotated[UserTurn, Tag("message:user")] | Annotated[AssistantTurn, Tag("message:assistant")],
    Discriminator(_role_kind),
]


# System prompt, tools and the choice among them.


SystemPrompt = Annotated[
    Annotated[str, Tag("content:text")] | Annotated[list[TextBlock], Tag("content:blocks")],
    Discriminator(_text_or_blocks),
    Field(description="The system prompt: a string, or text blocks."),
]


@with_config(STRICT)
class ClientTool(TypedDict):
    """A function the model may call (client tools only: Mortar runs no server tools)."""

    type: NotRequired[Literal["custom"] | None]
    name: ToolName
    description: NotRequired[
        Annotated[str | None, Field(description="What the tool does, for the model.")]
    ]
    input_schema: Annotated[
        dict[str, Any], Field(description="A JSON Schema object describing the input.")
    ]


def _distinct_names(tools: list[ClientTool]) -> list[ClientTool]:
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        if tool["name"] in seen:
            raise PydanticCustomError(
                "tool_name_repeated",
                "Tool names must differ.",
                {"index": index, "name": tool["name"]},
            )
        seen.add(tool["name"])
    return tools


@with_config(STRICT)
class ToolChoiceMode(TypedDict):
    type: Literal["auto", "any", "none"]
    disable_parallel_tool_use: NotRequired[bool | None]


@with_config(STRICT)
class ToolChoiceTool(TypedDict):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: NotRequired[bool | None]


def _choice_kind(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else None
    if not isinstance(kind, str):
        return None
    return "choice:tool" if kind == "tool" else "choice:mode"


ToolChoice = Annotated[
    Annotated[ToolChoiceMode, Tag("choice:mode")] | Annotated[ToolChoiceTool, Tag("choice:tool")],
    Discriminator(_choice_kind),
]


def _choose_among_tools(
    value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
) -> Any:
    if value is None:
        return None
    tools = info.data.get("tools")  # absent when `tools` was refused: that error comes first
    if tools is None:
        raise PydanticCustomError("needs_tools", "`tool_choice` needs `tools`.")
    choice = handler(value)
    if choice["type"] == "tool" and all(tool["name"] != choice["name"] for tool in tools):
        raise PydanticCustomError(
            "unknown_tool", "The tool is not in `tools`.", {"name": choice["name"]}
        )
    return choice


# Thinking.


@with_config(STRICT)
class ThinkingEnabled(TypedDict):
    type: Literal["enabled"]
    budget_tokens: Annotated[
        int,
        Field(
            ge=MIN_THINKING_BUDGET,
            description="At least 1,024 and less than `max_tokens`. Model servers take thinking "
            "as an on/off switch, so the budget is checked, not forwarded.",
        ),
    ]


@with_config(STRICT)
class ThinkingDisabled(TypedDict):
    type: Literal["disabled"]


def _thinking_kind(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else None
    return f"thinking:{kind}" if isinstance(kind, str) else None


def _budget_under_max_tokens(value: Any, info: ValidationInfo) -> Any:
    max_tokens = info.data.get("max_tokens")
    if (
        isinstance(value, dict)
        and value.get("type") == "enabled"
        and isinstance(max_tokens, int)
        and value["budget_tokens"] >= max_tokens
    ):
        raise PydanticCustomError(
            "budget_over_max_tokens",
            "The thinking budget must be less than `max_tokens`.",
            {"max_tokens": max_tokens},
        )
    return value


Thinking = Annotated[
    Annotated[ThinkingEnabled, Tag("thinking:enabled")]
    | Annotated[ThinkingDisabled, Tag("thinking:disabled")],
    Discriminator(_thinking_kind),
]


# Sampling and metadata.


def _string_or_nothing(value: Any, handler: ValidatorFunctionWrapHandler) -> str | None:
    # A `user_id` that is not a string is dropped, never refused: it only labels the run, and a
    # client that sends an odd one should still get its answer.
    return value if isinstance(value, str) else None


@with_config(STRICT)
class Metadata(TypedDict):
    user_id: NotRequired[
        Annotated[
            str | None,
            WrapValidator(_string_or_nothing),
            Field(
                description="Your end user's ID: names the session when `X-Mortar-Session` "
                "isn't sent, and the end user unless `X-Mortar-End-User-Id` is."
            ),
        ]
    ]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "The model name is blank.")
    return value


Model = Annotated[
    str,
    AfterValidator(_not_blank),
    Field(
        description="The model to use; `GET /v1/models` lists them.",
        examples=["Qwen/Qwen2.5-7B-Instruct"],
    ),
]
Messages = Annotated[
    list[InputMessage],
    Field(
        min_length=1,
        max_length=MAX_MESSAGES,
        description="The conversation, oldest message first: 1 to 512 `user` and `assistant` "
        "messages.",
    ),
]
Tools = Annotated[
    Annotated[list[ClientTool], Field(max_length=MAX_TOOLS), AfterValidator(_distinct_names)]
    | None,
    Field(description="Tools the model may call, up to 128."),
]
ChoiceOfTool = Annotated[
    ToolChoice | None,
    WrapValidator(_choose_among_tools),
    Field(
        description="`auto` lets the model decide, `any` makes it call one, `tool` the one "
        "named, `none` none. `disable_parallel_tool_use` allows one call at most. Needs `tools`."
    ),
]
ThinkingSwitch = Annotated[
    Thinking | None,
    AfterValidator(_budget_under_max_tokens),
    Field(
        description="`enabled` turns on the model server's reasoning (returned as `thinking` "
        "blocks); `disabled` turns it off."
    ),
]


@with_config(
    ConfigDict(
        strict=True, extra="ignore", json_schema_extra={"examples": MESSAGES_REQUEST_EXAMPLES}
    )
)
class MessagesRequest(TypedDict):
    """The body of `POST /v1/messages`."""

    model: Model
    # `max_tokens` before `thinking`: the budget is checked against it.
    max_tokens: Annotated[
        int, Field(ge=1, description="The most tokens to generate; lowered to fit the context.")
    ]
    messages: Messages
    system: NotRequired[SystemPrompt | None]
    # `tools` before `tool_choice`: its check reads it.
    tools: NotRequired[Tools]
    tool_choice: NotRequired[ChoiceOfTool]
    stop_sequences: NotRequired[
        Annotated[
            list[NonEmptyString] | None,
            Field(max_length=MAX_STOP_SEQUENCES, description="Up to 16 stop sequences."),
        ]
    ]
    temperature: NotRequired[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None]
    top_p: NotRequired[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None]
    top_k: NotRequired[
        Annotated[
            Annotated[int, Field(ge=0)] | None,
            Field(description="Accepted and not forwarded: OpenAI-style servers take no `top_k`."),
        ]
    ]
    metadata: NotRequired[Metadata | None]
    stream: NotRequired[
        Annotated[
            bool | None,
            Field(
                description="Stream the reply as Anthropic's server-sent events (default false)."
            ),
        ]
    ]
    thinking: NotRequired[ThinkingSwitch]


@with_config(STRICT)
class CountTokensRequest(TypedDict):
    """The body of `POST /v1/messages/count_tokens`: a Messages request without its output
    settings."""

    model: Model
    messages: Messages
    system: NotRequired[SystemPrompt | None]
    tools: NotRequired[Tools]
    tool_choice: NotRequired[ChoiceOfTool]
    thinking: NotRequired[ThinkingSwitch]


# What validates a body against each schema.
messages_request_schema: TypeAdapter[MessagesRequest] = TypeAdapter(MessagesRequest)
count_tokens_request_schema: TypeAdapter[CountTokensRequest] = TypeAdapter(CountTokensRequest)
