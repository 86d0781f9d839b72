"""A Messages body validated into the chat request the pipeline works with, or refused with the
message of its first wrong field (`gateway.surfaces.messages.validation`, `refusals`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from core.errors import InvalidParameter, InvalidRequest
from gateway.errors import InvalidJson, InvalidRole, InvalidTools
from gateway.surfaces.messages.validation import (
    validate_count_tokens_request,
    validate_messages_request,
)

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOOL = {"name": "get_weather", "input_schema": {"type": "object"}}
IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
}
BMP = {**IMAGE, "source": {**IMAGE["source"], "media_type": "image/bmp"}}
IMAGE_RESULT = {"type": "tool_result", "tool_use_id": "t", "content": [IMAGE]}


def body(**fields: Any) -> bytes:
    return orjson.dumps(
        {
            "model": MODEL,
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "Hi"}],
            **fields,
        }
    )


def refusal(raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        validate_messages_request(raw)
    return caught.value


def test_a_request_becomes_the_chat_request_it_asks_for() -> None:
    chat = validate_messages_request(
        body(
            system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "Hi"}, IMAGE]},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Weather?"},
            ],
            tools=[TOOL],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            stop_sequences=["END"],
            temperature=0.2,
            top_p=0.5,
            top_k=10,
            metadata={"user_id": "u-1"},
            stream=True,
            max_tokens=2000,
            thinking={"type": "enabled", "budget_tokens": 1024},
            unknown_field={"ignored": True},
        )
    )
    assert chat.model == MODEL
    assert chat.messages == [
        {"role": "system", "content": "Be brief.\nBe kind."},
        {"role": "user", "content": "Hi"},  # the image is the vision rules' (refused or read)
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Weather?"},
    ]
    assert chat.tools == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    assert (chat.tool_choice, chat.parallel_tool_calls) == ("required", False)
    assert chat.sampling == {"temperature": 0.2, "top_p": 0.5, "stop": ["END"]}  # no top_k
    assert (chat.max_tokens, chat.stream, chat.user) == (2000, True, "u-1")
    assert (chat.enable_thinking, chat.has_images) == (True, True)


def test_without_thinking_or_images_there_is_no_switch_and_nothing_to_refuse() -> None:
    chat = validate_messages_request(body())
    assert (chat.enable_thinking, chat.has_images, chat.stream) == (None, False, None)
    assert validate_messages_request(body(thinking={"type": "disabled"})).enable_thinking is False


def test_a_user_id_that_is_not_a_string_is_dropped_not_refused() -> None:
    assert validate_messages_request(body(metadata={"user_id": 42})).user is None


@pytest.mark.parametrize(
    ("raw", "error", "message", "param"),
    [
        (b"[1]", InvalidJson, "The request body must be a JSON object.", None),
        (body(max_tokens=None), InvalidParameter, "`max_tokens` is required.", "max_tokens"),
        (
            body(max_tokens=1.5),
            InvalidParameter,
            "`max_tokens` must be a positive whole number.",
            "max_tokens",
        ),
        (body(model="  "), InvalidParameter, "`model` must be a non-empty string.", "model"),
        (
            body(messages=[]),
            InvalidParameter,
            "`messages` must hold at least one message.",
            "messages",
        ),
        (
            body(messages=[{"role": "tool", "content": "x"}]),
            InvalidRole,
            "`messages[0].role` is 'tool'; use user or assistant (the system prompt goes in "
            "`system`).",
            "messages[0].role",
        ),
        (
            body(messages=[{"role": "assistant", "content": [IMAGE]}]),
            InvalidParameter,
            "`messages[0].content[0].type` 'image' cannot be used here: a user message holds "
            "`text`, `image` and `tool_result` blocks, an assistant message `text`, `tool_use` "
            "and `thinking` blocks.",
            "messages[0].content[0].type",
        ),
        (
            body(messages=[{"role": "user", "content": [BMP]}]),
            InvalidParameter,
            "`messages[0].content[0].source.media_type` must be image/png, image/jpeg, "
            "image/webp or image/gif.",
            "messages[0].content[0].source.media_type",
        ),
        (
            body(messages=[{"role": "user", "content": [{"type": "tool_result"}]}]),
            InvalidParameter,
            "`messages[0].content[0].tool_use_id` must name the `tool_use` block this result "
            "answers.",
            "messages[0].content[0].tool_use_id",
        ),
        (
            body(messages=[{"role": "user", "content": [IMAGE_RESULT]}]),
            InvalidParameter,
            "`messages[0].content[0].content[0].type` must be `text`: only text blocks are "
            "allowed here.",
            "messages[0].content[0].content[0].type",
        ),
        (
            body(tools=[{"name": "x"}]),
            InvalidTools,
            "`tools[0].input_schema` is required: a JSON Schema object describing the tool's "
            "input.",
            "tools[0].input_schema",
        ),
        (
            body(tools=[TOOL, TOOL]),
            InvalidTools,
            "`tools[1].name` repeats 'get_weather'; tool names must differ.",
            "tools[1].name",
        ),
        (
            body(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
            InvalidTools,
            "`tools[0].type` must be `custom` or left out: Mortar serves client tools only.",
            "tools[0].type",
        ),
        (
            body(tools=[TOOL], tool_choice={"type": "tool", "name": "other"}),
            InvalidRequest,
            "`tool_choice` names 'other', which is not in `tools`.",
            "tool_choice",
        ),
        (
            body(stop_sequences=[""]),
            InvalidParameter,
            "`stop_sequences` must be a list of at most 16 non-empty strings.",
            "stop_sequences",
        ),
        (body(top_k=-1), InvalidParameter, "`top_k` must be a whole number, 0 or more.", "top_k"),
        (body(stream="yes"), InvalidParameter, "`stream` must be a boolean.", "stream"),
        (
            body(thinking={"type": "enabled", "budget_tokens": 100}, max_tokens=5000),
            InvalidParameter,
            "`thinking.budget_tokens` must be at least 1024.",
            "thinking.budget_tokens",
        ),
        (
            body(thinking={"type": "sometimes"}),
            InvalidParameter,
            '`thinking` must be {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}.',
            "thinking",
        ),
        # Of several wrong fields, the first in precedence is reported.
        (
            body(model=1, max_tokens=0, temperature=9),
            InvalidParameter,
            "`model` must be a non-empty string.",
            "model",
        ),
    ],
)
def test_a_wrong_field_is_refused_with_its_message(
    raw: bytes, error: type[InvalidRequest], message: str, param: str | None
) -> None:
    refused = refusal(raw)
    assert isinstance(refused, error)
    assert (refused.message, refused.param) == (message, param)


def test_a_count_tokens_request_needs_no_max_tokens() -> None:
    chat = validate_count_tokens_request(
        orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]})
    )
    assert chat.messages == [{"role": "user", "content": "Hi"}]
    assert chat.max_tokens is None
