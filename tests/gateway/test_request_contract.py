"""Unit tests of the declared request contract: strict types, the error table, its precedence."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import InvalidParameter, InvalidRequest
from gateway.contract.refusals import PRECEDENCE, REFUSALS
from gateway.contract.request import chat_request_schema
from gateway.contract.validation import validate_chat_request
from gateway.errors import InvalidRole, InvalidToolChoice, InvalidTools

USER = {"role": "user", "content": "Hello"}
TOOL = {"type": "function", "function": {"name": "get_weather"}}


def refusal(data: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as raised:
        validate_chat_request(data)
    return raised.value


def test_every_refusable_field_of_the_schema_has_its_place_in_the_precedence() -> None:
    fields = set(chat_request_schema.json_schema()["properties"])

    # `user` is never refused: a value that is not a string is dropped.
    assert set(PRECEDENCE) == fields - {"user"}
    assert {path.split(".")[0] for path, _ in REFUSALS} == set(PRECEDENCE)


@pytest.mark.parametrize(
    ("fields", "param", "error"),
    [
        pytest.param({"model": "", "tools": "x"}, "model", InvalidParameter, id="model-first"),
        pytest.param({"tools": "x", "tool_choice": 1}, "tools", InvalidTools, id="then-tools"),
        pytest.param(
            {"tool_choice": "auto", "messages": []}, "tool_choice", InvalidToolChoice, id="choice"
        ),
        pytest.param(
            {"parallel_tool_calls": "no", "stream": "yes"},
            "parallel_tool_calls",
            InvalidParameter,
            id="parallel",
        ),
        pytest.param({"stream": "yes", "messages": None}, "stream", InvalidParameter, id="stream"),
        pytest.param(
            {"messages": [{"role": "wizard"}], "stream_options": 1},
            "messages[0].role",
            InvalidRole,
            id="messages",
        ),
        pytest.param(
            {"stream_options": 1, "max_tokens": 0}, "stream_options", InvalidParameter, id="opts"
        ),
        pytest.param(
            {"max_completion_tokens": 0, "temperature": 9},
            "max_completion_tokens",
            InvalidParameter,
            id="caps",
        ),
        pytest.param({"response_format": 1, "top_p": 2}, "top_p", InvalidParameter, id="sampling"),
    ],
)
def test_of_several_wrong_fields_the_first_checked_is_reported(
    fields: dict[str, Any], param: str, error: type[InvalidRequest]
) -> None:
    refused = refusal({"messages": [USER], **fields})

    assert (type(refused), refused.param) == (error, param)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        pytest.param({"max_tokens": "100"}, "max_tokens", id="string-is-not-an-int"),
        pytest.param({"max_tokens": 1.0}, "max_tokens", id="float-is-not-an-int"),
        pytest.param({"temperature": True}, "temperature", id="true-is-not-a-number"),
        pytest.param({"seed": 1.5}, "seed", id="fraction-is-not-an-integer"),
        pytest.param({"stream": 1}, "stream", id="one-is-not-a-boolean"),
        pytest.param({"stream_options": {"include_usage": "true"}}, "stream_options.include_usage"),
        pytest.param({"stream_options": [["include_usage", True]]}, "stream_options"),
        pytest.param({"n": True}, "n", id="true-is-not-one"),
    ],
)
def test_types_are_strict(fields: dict[str, Any], param: str) -> None:
    assert refusal({"messages": [USER], **fields}).param == param


def test_n_may_be_one_written_as_a_float() -> None:
    assert validate_chat_request({"messages": [USER], "n": 1.0}).sampling == {}


@pytest.mark.parametrize(
    ("messages", "param", "message"),
    [
        pytest.param(
            [USER, USER, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": 1}]}],
            "messages[2].content[1]",
            "`messages[2].content[1]` must be a content part object with a string `type`.",
            id="part-through-two-unions",
        ),
        pytest.param(
            [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": 1}}]}],
            "messages[0].tool_calls[0].function.name",
            "`messages[0].tool_calls[0].function.name` must be a string.",
            id="tool-call-name",
        ),
        pytest.param(
            [{"role": "assistant", "tool_calls": []}],
            "messages[0].content",
            "`messages[0].content` must be a string or an array of content parts; only an "
            "assistant message with `tool_calls` may leave it out.",
            id="empty-tool-calls-need-content",
        ),
        pytest.param(
            [{"role": "tool", "content": "21 C", "tool_calls": [{"id": "c"}]}],
            "messages[0].tool_calls",
            "`messages[0].tool_calls` is only allowed on assistant messages.",
            id="tool-calls-on-a-tool-message",
        ),
        pytest.param(
            [{"role": 1, "content": "Hello"}],
            "messages[0].role",
            "`messages[0].role` must be a string.",
            id="role-a-number",
        ),
        pytest.param([None], "messages[0]", "`messages[0]` must be an object.", id="message-null"),
    ],
)
def test_the_param_and_message_name_the_field_through_the_union_tags(
    messages: list[Any], param: str, message: str
) -> None:
    refused = refusal({"messages": messages})

    assert (refused.param, refused.message) == (param, message)


def test_a_repeated_tool_name_names_the_repeat() -> None:
    refused = refusal({"messages": [USER], "tools": [TOOL, {**TOOL}, TOOL]})

    assert (type(refused), refused.param) == (InvalidTools, "tools[1].function.name")
    assert (
        refused.message == "`tools[1].function.name` repeats 'get_weather'; tool names must differ."
    )


def test_a_named_choice_of_a_tool_not_given_names_it() -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}

    refused = refusal({"messages": [USER], "tools": [TOOL], "tool_choice": choice})

    assert (type(refused), refused.message) == (
        InvalidToolChoice,
        "`tool_choice` names 'get_time', which is not in `tools`.",
    )


def test_sampling_fields_are_passed_on_as_sent() -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}

    chat = validate_chat_request(
        {"messages": [USER], "temperature": 1, "top_p": 0.5, "response_format": response_format}
    )

    assert chat.sampling == {"temperature": 1, "top_p": 0.5, "response_format": response_format}
    assert type(chat.sampling["temperature"]) is int
