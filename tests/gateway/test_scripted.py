"""Unit tests of the scripted model: reply pieces, which tools it calls, and their arguments."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.contract.chat import ChatRequest
from gateway.generation.reply import Generation
from gateway.generation.scripted import (
    ScriptedModel,
    empty_arguments,
    reply_text,
    text_pieces,
    tools_to_call,
)
from gateway.tokens import default_counter

SPEC_REPLY = "It caps how many tokens the model may generate for this reply."


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


TOOLS = [tool("get_weather"), tool("get_time"), tool("get_news")]
USER = {"role": "user", "content": "What is the weather in Paris?"}
CALLED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'}


def chat(
    *,
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = TOOLS,
    tool_choice: str | dict[str, Any] | None = None,
    parallel_tool_calls: bool | None = None,
) -> ChatRequest:
    return ChatRequest(
        model=None,
        messages=messages or [USER],
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel_tool_calls,
    )


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def test_the_spec_reply_comes_in_pieces_of_three_words() -> None:
    assert text_pieces(SPEC_REPLY) == [
        "It caps how",
        " many tokens the",
        " model may generate",
        " for this reply.",
    ]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(SPEC_REPLY, id="spec-reply"),
        pytest.param("one", id="one-word"),
        pytest.param("  leading and trailing  ", id="outer-spaces"),
        pytest.param("line one\n\nline two\r\n\tindented  ", id="line-breaks"),
        pytest.param("a  b   c    d     e", id="runs-of-spaces"),
        pytest.param("日本語 のテキスト 🦩 ok", id="non-ascii"),
        pytest.param("   ", id="only-spaces"),
        pytest.param("\n", id="only-newline"),
    ],
)
def test_text_pieces_join_back_to_the_text_exactly(text: str) -> None:
    pieces = text_pieces(text)

    assert "".join(pieces) == text
    assert all(pieces)


def test_empty_text_has_no_pieces() -> None:
    assert text_pieces("") == []


def test_whitespace_only_text_is_one_piece() -> None:
    assert text_pieces("  \n ") == ["  \n "]


def test_trailing_whitespace_joins_the_last_piece() -> None:
    assert text_pieces("a b c d e\n\n") == ["a b c", " d e\n\n"]


def test_it_calls_the_named_function() -> None:
    assert tools_to_call(chat(tool_choice=named("get_time"))) == [tool("get_time")]


def test_it_calls_the_named_function_even_after_tool_results() -> None:
    messages = [USER, CALLED, RESULT]

    assert tools_to_call(chat(messages=messages, tool_choice=named("get_news"))) == [
        tool("get_news")
    ]


def test_required_calls_every_tool() -> None:
    assert tools_to_call(chat(tool_choice="required")) == TOOLS


def test_required_calls_every_tool_when_parallel_calls_are_allowed() -> None:
    assert tools_to_call(chat(tool_choice="required", parallel_tool_calls=True)) == TOOLS


def test_required_without_parallel_calls_calls_only_the_first() -> None:
    assert tools_to_call(chat(tool_choice="required", parallel_tool_calls=False)) == [
        tool("get_weather")
    ]


@pytest.mark.parametrize("choice", [None, "auto"], ids=["absent", "auto"])
def test_auto_calls_the_first_tool(choice: str | None) -> None:
    assert tools_to_call(chat(tool_choice=choice)) == [tool("get_weather")]


@pytest.mark.parametrize("choice", [None, "auto"], ids=["absent", "auto"])
def test_auto_answers_tool_results_in_text(choice: str | None) -> None:
    assert tools_to_call(chat(messages=[USER, CALLED, RESULT], tool_choice=choice)) == []


def test_none_calls_no_tool() -> None:
    assert tools_to_call(chat(tool_choice="none")) == []


def test_no_tools_means_no_calls() -> None:
    assert tools_to_call(chat(tools=None)) == []


def test_tool_results_are_answered_with_the_function_names() -> None:
    second = {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}
    called = {**CALLED, "tool_calls": [*CALLED["tool_calls"], second]}
    messages = [
        USER,
        called,
        RESULT,
        {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
        {"role": "tool", "tool_call_id": "call_unknown", "content": ""},
    ]

    assert reply_text(messages) == (
        'The tools answered: get_weather returned {"temp_c": 21}; get_time returned noon; '
        "call_unknown returned nothing."
    )


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            [{"role": "user", "content": " What does  MAX_TOKENS limit? "}],
            SPEC_REPLY,
            id="scripted-answer",
        ),
        pytest.param([USER], "You said: What is the weather in Paris?", id="echo"),
        pytest.param([{"role": "user", "content": "  "}], "Your message was empty.", id="empty"),
        pytest.param(
            [{"role": "system", "content": "Be brief."}],
            "Hello! This is Mortar's scripted model; send a user message to get a reply.",
            id="no-user-message",
        ),
    ],
)
def test_reply_text(messages: list[dict[str, Any]], expected: str) -> None:
    assert reply_text(messages) == expected


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"type": "string"}, "", id="string"),
        pytest.param({"type": "number"}, 0, id="number"),
        pytest.param({"type": "integer"}, 0, id="integer"),
        pytest.param({"type": "boolean"}, False, id="boolean"),
        pytest.param({"type": "array", "items": {"type": "string"}}, [], id="array"),
        pytest.param({"type": "object"}, {}, id="object"),
        pytest.param({"type": "null"}, None, id="null"),
        pytest.param({"type": ["string", "null"]}, "", id="string-or-null"),
        pytest.param({"type": ["null", "integer"]}, 0, id="null-or-integer"),
        pytest.param({"type": ["null"]}, None, id="only-null-in-a-list"),
        pytest.param({"enum": ["a", "b"]}, "", id="no-type"),
        pytest.param({"type": "date"}, "", id="unknown-type"),
        pytest.param("not a schema", "", id="schema-not-an-object"),
    ],
)
def test_empty_arguments_for_each_json_type(schema: Any, expected: Any) -> None:
    parameters = {"type": "object", "properties": {"x": schema}, "required": ["x"]}

    arguments = empty_arguments(parameters)

    assert arguments == {"x": expected}
    assert type(arguments["x"]) is type(expected)


def test_empty_arguments_fill_only_required_arguments_in_order() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "units": {"type": "string"},
        },
        "required": ["days", "city", "undeclared"],
    }

    arguments = empty_arguments(parameters)

    assert list(arguments.items()) == [("days", 0), ("city", ""), ("undeclared", "")]


@pytest.mark.parametrize(
    "parameters",
    [
        pytest.param(None, id="no-parameters"),
        pytest.param({"type": "object"}, id="nothing-required"),
        pytest.param({"type": "object", "required": "city"}, id="required-not-a-list"),
        pytest.param({"type": "object", "required": [1, None]}, id="required-not-names"),
    ],
)
def test_empty_arguments_are_empty_without_required_names(parameters: Any) -> None:
    assert empty_arguments(parameters) == {}


async def test_a_tool_call_streams_its_id_and_name_first_then_its_arguments() -> None:
    weather = tool(
        "get_weather",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    )
    generation = Generation()
    model = ScriptedModel(counter=default_counter())

    deltas = [
        delta
        async for delta in model.generate(
            chat(tools=[weather]), max_tokens=100, generation=generation
        )
    ]

    [call] = generation.tool_calls
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"","days":0}'}
    assert deltas == [
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":"","days":0}'}}]},
    ]
    assert generation.finish_reason == "tool_calls"
    assert generation.content is None


async def test_a_text_reply_cut_by_max_tokens_finishes_with_length() -> None:
    generation = Generation()
    model = ScriptedModel(counter=default_counter())
    question = [{"role": "user", "content": "What does max_tokens limit?"}]

    deltas = [
        delta
        async for delta in model.generate(
            chat(messages=question, tools=None), max_tokens=5, generation=generation
        )
    ]

    assert deltas == [{"content": "It caps how"}, {"content": " many tokens"}]
    assert (generation.content, generation.completion_tokens, generation.finish_reason) == (
        "It caps how many tokens",
        5,
        "length",
    )
