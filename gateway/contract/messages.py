"""The messages of a chat-completions request: one shape per role, their content and tool calls.

Part of the request schema (`request.py`), strict as it is. A message's role, a content part's
type and the JSON type of `content` are union tags, read by a small function; tags are written
`kind:name` (see `errors.py`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypeAlias

from pydantic import AfterValidator, ConfigDict, Discriminator, Field, Tag, with_config
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

MAX_TOOL_CALLS = 128
# `developer` is OpenAI's newer name for `system` (treated as `system`: it means the same).
ROLE_ALIASES = {"developer": "system"}

# The parts of a request are TypedDicts: pydantic-core validates them straight into dicts, which
# is what the pipeline works with, at half the cost of building model instances.
STRICT = ConfigDict(strict=True, extra="ignore")

NonEmptyString = Annotated[str, Field(min_length=1)]


# Tool calls an assistant message made, as the model returned them.


@with_config(STRICT)
class CalledFunction(TypedDict):
    name: Annotated[str, Field(description="The function that was called.")]
    arguments: Annotated[str, Field(description="Its arguments, as JSON text.")]


@with_config(STRICT)
class ToolCall(TypedDict):
    id: Annotated[
        NonEmptyString,
        Field(description="The call's ID; the `tool` message answering it repeats it."),
    ]
    type: NotRequired[Literal["function"]]
    function: CalledFunction


# Content: a string, or an array of content parts whose `text` parts are joined.


@with_config(STRICT)
class TextPart(TypedDict):
    type: Literal["text"]
    text: str


@with_config(STRICT)
class ImageUrl(TypedDict):
    url: Annotated[
        str,
        Field(
            description="An inline data URL, `data:image/<png|jpeg|webp|gif>;base64,…`, with "
            "canonical base64, at most 6 MiB of characters. Remote `http(s)` URLs are refused: "
            "Mortar never fetches a URL a client names.",
            examples=["data:image/png;base64,iVBORw0KGgo…"],
        ),
    ]


@with_config(STRICT)
class ImagePart(TypedDict):
    """An image: forwarded, checked, to a model with vision; dropped for any other model."""

    type: Literal["image_url"]
    image_url: ImageUrl


@with_config(STRICT)
class OtherPart(TypedDict):
    """A part without text or image (audio, a file…): accepted and dropped."""

    type: Annotated[
        str,
        Field(json_schema_extra={"not": {"enum": ["text", "image_url"]}}, examples=["input_audio"]),
    ]


# A content part as validated (the union below, untagged).
AnyPart: TypeAlias = TextPart | ImagePart | OtherPart

_PART_TAGS = {"text": "part:text", "image_url": "part:image"}


def _part_kind(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return _PART_TAGS.get(value["type"], "part:other")
    return None


ContentPart = Annotated[
    Annotated[TextPart, Tag("part:text")]
    | Annotated[ImagePart, Tag("part:image")]
    | Annotated[OtherPart, Tag("part:other")],
    Discriminator(_part_kind),
]


def _content_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "content:text"
    if isinstance(value, list):
        return "content:parts"
    return None


Content = Annotated[
    Annotated[str, Tag("content:text")] | Annotated[list[ContentPart], Tag("content:parts")],
    Discriminator(_content_kind),
    Field(
        description="The message text. The `text` of each content part is joined with line "
        "breaks; parts without text are dropped, except `image_url` parts on user messages to a "
        "model with vision (`vision: true`), which are checked and forwarded as sent."
    ),
]


def _no_tool_calls(value: Any) -> None:
    if value is not None and value != []:  # an empty list is as good as none
        raise PydanticCustomError("assistant_only", "Only an assistant message has tool calls.")


# `tool_calls` on a message of another role: refused unless empty (undocumented: it has none).
NoToolCalls: TypeAlias = SkipJsonSchema[Annotated[Any, AfterValidator(_no_tool_calls)]]


# Messages, one shape per role. Fields are declared in the order they are checked, so of two
# errors in one message the first is reported.


@with_config(STRICT)
class SystemMessage(TypedDict):
    role: Annotated[
        Literal["system", "developer"], Field(description="`developer` is read as `system`.")
    ]
    tool_calls: NotRequired[NoToolCalls]
    content: Content


@with_config(STRICT)
class UserMessage(TypedDict):
    role: Literal["user"]
    tool_calls: NotRequired[NoToolCalls]
    content: Content


@with_config(STRICT)
class AssistantMessage(TypedDict):
    """An assistant reply in text."""

    role: Literal["assistant"]
    tool_calls: NotRequired[
        Annotated[
            Annotated[list[ToolCall], Field(max_length=0)] | None,
            Field(description="Empty or absent: a message with calls is the other shape."),
        ]
    ]
    content: Content


@with_config(STRICT)
class AssistantToolCallsMessage(TypedDict):
    """An assistant message that called tools; its `content` may be null or left out."""

    role: Literal["assistant"]
    tool_calls: Annotated[
        list[ToolCall],
        Field(
            min_length=1,
            max_length=MAX_TOOL_CALLS,
            description="The calls the message made, as the model returned them.",
        ),
    ]
    content: NotRequired[Content | None]


@with_config(STRICT)
class ToolMessage(TypedDict):
    """What a function returned, answering one tool call."""

    role: Literal["tool"]
    tool_calls: NotRequired[NoToolCalls]
    content: Content
    tool_call_id: Annotated[
        NonEmptyString, Field(description="The ID of the call this message answers.")
    ]


_ROLE_TAGS = {
    "system": "message:system",
    "developer": "message:system",
    "user": "message:user",
    "assistant": "message:assistant",
    "tool": "message:tool",
}


def _message_kind(value: Any) -> str | None:
    role = value.get("role") if isinstance(value, dict) else None
    if not isinstance(role, str):
        return None
    if role == "assistant" and value.get("tool_calls"):  # `[]` is as good as none
        return "message:assistant-tool-calls"
    # An unknown role is an unknown tag (`union_tag_invalid`): `invalid_role`.
    return _ROLE_TAGS.get(role, "unknown")


Message = Annotated[
    Annotated[SystemMessage, Tag("message:system")]
    | Annotated[UserMessage, Tag("message:user")]
    | Annotated[AssistantMessage, Tag("message:assistant")]
    | Annotated[AssistantToolCallsMessage, Tag("message:assistant-tool-calls")]
    | Annotated[ToolMessage, Tag("message:tool")],
    Discriminator(_message_kind),
]
