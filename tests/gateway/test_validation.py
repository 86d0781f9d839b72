"""Unit tests of request validation: what a valid body normalizes to, and what is refused."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from core.errors import InvalidParameter, MortarError
from gateway.contract.chat import ChatRequest
from gateway.contract.validation import parse_json_body, validate_chat_request
from gateway.errors import InvalidJson, InvalidRole, InvalidToolChoice, InvalidTools

USER = {"role": "user", "content": "Hello"}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def validate(**fields: Any) -> ChatRequest:
    return validate_chat_request({"messages": [USER], **fields})


def test_it_treats_the_developer_role_as_system() -> None:
    chat = validate_chat_request(
        {"messages": [{"role": "developer", "content": "Be brief."}, USER]}
    )

    assert chat.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
    ]


def test_it_joins_text_parts_with_line_breaks_and_drops_other_parts() -> None:
    content = [
        {"type": "text", "text": "first"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "text", "text": "second"},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "text", "text": ""},
    ]

    chat = validate_chat_request({"messages": [{"role": "user", "content": content}]})

    assert chat.messages == [{"role": "user", "content": "first\nsecond\n"}]


def test_a_message_of_only_an_image_part_has_empty_content() -> None:
    content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]

    chat = validate_chat_request({"messages": [{"role": "user", "content": content}]})

    assert chat.messages == [{"role": "user", "content": ""}]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({}, None, id="neither"),
        pytest.param({"max_tokens": 200}, 200, id="max_tokens-only"),
        pytest.param({"max_completion_tokens": 300}, 300, id="max_completion_tokens-only"),
        pytest.param({"max_tokens": 200, "max_completion_tokens": 300}, 200, id="max_tokens-less"),
        pytest.param(
            {"max_tokens": 500, "max_completion_tokens": 40}, 40, id="max_completion_tokens-less"
        ),
        pytest.param({"max_tokens": 1, "max_completion_tokens": 1}, 1, id="both-one"),
        pytest.param({"max_tokens": None, "max_completion_tokens": 7}, 7, id="null-max_tokens"),
    ],
)
def test_the_smaller_output_cap_wins(fields: dict[str, Any], expected: int | None) -> None:
    assert validate(**fields).max_tokens == expected


def test_sampling_is_empty_when_no_sampling_field_is_given() -> None:
    assert validate().sampling == {}


def test_sampling_keeps_exactly_the_fields_given() -> None:
    chat = validate(
        temperature=0.2,
        top_p=1,
        stop=["\n\n", "END"],
        seed=7,
        response_format={"type": "json_object"},
        frequency_penalty=None,
        n=1,
        foo="bar",
    )

    assert chat.sampling == {
        "temperature": 0.2,
        "top_p": 1,
        "stop": ["\n\n", "END"],
        "seed": 7,
        "response_format": {"type": "json_object"},
    }


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({"temperature": 0}, {"temperature": 0}, id="temperature-low-edge"),
        pytest.param({"temperature": 2}, {"temperature": 2}, id="temperature-high-edge"),
        pytest.param({"top_p": 0.0}, {"top_p": 0.0}, id="top_p-low-edge"),
        pytest.param({"presence_penalty": -2}, {"presence_penalty": -2}, id="presence-low-edge"),
        pytest.param({"frequency_penalty": 2.0}, {"frequency_penalty": 2.0}, id="frequency-high"),
        pytest.param({"stop": "END"}, {"stop": "END"}, id="stop-string"),
        pytest.param({"stop": ["a"] * 16}, {"stop": ["a"] * 16}, id="stop-sixteen"),
        pytest.param({"logprobs": False}, {"logprobs": False}, id="logprobs"),
        pytest.param({"top_logprobs": 20}, {"top_logprobs": 20}, id="top_logprobs-high-edge"),
    ],
)
def test_sampling_fields_at_their_limits_are_kept(
    fields: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert validate(**fields).sampling == expected


def test_fields_set_to_null_count_as_absent() -> None:
    chat = validate_chat_request(
        {
            "messages": [USER],
            "model": None,
            "tools": None,
            "tool_choice": None,
            "parallel_tool_calls": None,
            "stream": None,
            "stream_options": None,
            "max_tokens": None,
            "max_completion_tokens": None,
            "user": None,
            "temperature": None,
            "stop": None,
        }
    )

    assert chat == ChatRequest(model=None, messages=[{"role": "user", "content": "Hello"}])


def test_unknown_fields_are_ignored() -> None:
    chat = validate(foo=1, functions=[{"name": "legacy"}], metadata={"a": "b"})

    assert chat == ChatRequest(model=None, messages=[{"role": "user", "content": "Hello"}])


@pytest.mark.parametrize("user", [42, True, ["alice"], {"id": "alice"}], ids=repr)
def test_a_user_that_is_not_a_string_is_dropped_not_refused(user: Any) -> None:
    assert validate(user=user).user is None


def test_a_string_user_is_kept_as_sent() -> None:
    assert validate(user=" alice ").user == " alice "


def test_the_model_name_is_stripped() -> None:
    assert validate(model="  Qwen/Qwen2.5-7B-Instruct ").model == "Qwen/Qwen2.5-7B-Instruct"


def test_stream_and_include_usage_are_read() -> None:
    chat = validate(stream=True, stream_options={"include_usage": True})

    assert (chat.stream, chat.include_usage) == (True, True)


def test_stream_options_without_include_usage_means_no_usage() -> None:
    assert validate(stream_options={}).include_usage is False


def test_tools_keep_only_the_documented_function_fields() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": None,
            "parameters": {"type": "object"},
            "strict": True,
            "extra": "dropped",
        },
        "cache_control": {"type": "ephemeral"},
    }

    chat = validate(tools=[tool], tool_choice="required", parallel_tool_calls=False)

    assert chat.tools == [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object"}, "strict": True},
        }
    ]
    assert (chat.tool_choice, chat.parallel_tool_calls) == ("required", False)


def test_a_named_tool_choice_is_normalized_and_named() -> None:
    choice = {"type": "function", "function": {"name": "get_weather", "extra": 1}, "x": 2}

    chat = validate(tools=[WEATHER], tool_choice=choice)

    assert chat.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert chat.named_tool == "get_weather"


def test_a_string_tool_choice_names_no_tool() -> None:
    assert validate(tools=[WEATHER], tool_choice="auto").named_tool is None


def test_an_agent_turn_normalizes_tool_calls_and_tool_results() -> None:
    messages = [
        USER,
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    "index": 0,
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}', "name": "x"},
    ]

    chat = validate_chat_request({"messages": messages, "tools": [WEATHER]})

    assert chat.messages == [
        {"role": "user", "content": "Hello"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
            "content": None,
        },
        {"role": "tool", "content": '{"temp_c": 21}', "tool_call_id": "call_1"},
    ]


@pytest.mark.parametrize(
    ("data", "error", "param"),
    [
        pytest.param({}, InvalidParameter, "messages", id="no-messages"),
        pytest.param({"messages": [USER] * 513}, InvalidParameter, "messages", id="513-messages"),
        pytest.param(
            {"messages": [{"role": "wizard", "content": "hi"}]},
            InvalidRole,
            "messages[0].role",
            id="unknown-role",
        ),
        pytest.param(
            {"messages": [USER, {"role": "user", "content": [{"type": "text", "text": 1}]}]},
            InvalidParameter,
            "messages[1].content[0].text",
            id="text-part-not-string",
        ),
        pytest.param(
            {"messages": [USER], "tools": [WEATHER, WEATHER]},
            InvalidTools,
            "tools[1].function.name",
            id="duplicate-tool",
        ),
        pytest.param(
            {"messages": [USER], "tool_choice": "auto"},
            InvalidToolChoice,
            "tool_choice",
            id="tool_choice-without-tools",
        ),
        pytest.param(
            {"messages": [USER], "max_completion_tokens": 0},
            InvalidParameter,
            "max_completion_tokens",
            id="max_completion_tokens-zero",
        ),
    ],
)
def test_it_refuses_with_the_code_and_the_param_to_blame(
    data: dict[str, Any], error: type[MortarError], param: str
) -> None:
    with pytest.raises(error) as raised:
        validate_chat_request(data)

    assert raised.value.param == param
    assert raised.value.status == 400


def test_too_many_messages_says_how_many_were_sent() -> None:
    with pytest.raises(InvalidParameter) as raised:
        validate_chat_request({"messages": [USER] * 513})

    assert raised.value.message == "`messages` holds 513 messages; at most 512 are allowed."


def test_512_messages_are_allowed() -> None:
    assert len(validate_chat_request({"messages": [USER] * 512}).messages) == 512


def test_parse_json_body_returns_the_object() -> None:
    body = orjson.dumps({"messages": [USER], "x": [1, 2.5, None]})

    assert parse_json_body(body) == {"messages": [USER], "x": [1, 2.5, None]}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"{", id="truncated"),
        pytest.param(b"[]", id="array"),
        pytest.param(b'"hi"', id="string"),
        pytest.param(b"null", id="null"),
        pytest.param(b'{"a": "\xff"}', id="invalid-utf8"),
        pytest.param(b'{"a": "\\ud800"}', id="lone-surrogate"),
        pytest.param(b"\xef\xbb\xbf{}", id="byte-order-mark"),
        pytest.param(b"{}" + b" x", id="trailing-garbage"),
        pytest.param(b'{"a": NaN}', id="nan"),
    ],
)
def test_parse_json_body_refuses_anything_but_one_json_object(body: bytes) -> None:
    with pytest.raises(InvalidJson) as raised:
        parse_json_body(body)

    assert raised.value.code == "invalid_json"
    assert raised.value.status == 400
