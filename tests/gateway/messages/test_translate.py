"""The Anthropic ⇄ OpenAI translation: one example per rule, then properties over generated
conversations (there and back keeps the meaning) and replies (streamed = not streamed)."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import orjson
import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.contract.validation import validate_chat_request
from gateway.surfaces.messages.translate import (
    MessageStream,
    chat_stop_reason,
    chat_to_messages,
    completion_to_message,
    encode_event,
    messages_to_chat,
)
from gateway.surfaces.messages.translate.tool_calls import (
    UNPARSED_ARGUMENTS_KEY,
    tool_input,
    tool_use_id,
)

PNG = (  # a 1x1 pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9"
    "awAAAABJRU5ErkJggg=="
)


# --- Messages request → chat request, one rule at a time ---


def test_a_system_string_or_text_blocks_become_the_first_system_message() -> None:
    as_string = messages_to_chat(
        {"system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert as_string["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]

    blocks = [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Answer in French."},
    ]
    as_blocks = messages_to_chat(
        {"system": blocks, "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert as_blocks["messages"][0] == {
        "role": "system",
        "content": [
            {"type": "text", "text": "Be brief."},
            {"type": "text", "text": "Answer in French."},
        ],
    }

    no_system = messages_to_chat({"messages": [{"role": "user", "content": "Hi"}]})
    assert no_system["messages"] == [{"role": "user", "content": "Hi"}]


def test_text_and_image_blocks_become_text_and_data_url_parts() -> None:
    chat = messages_to_chat(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        },
                        {"type": "text", "text": "Be precise."},
                    ],
                }
            ]
        }
    )
    assert chat["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "text", "text": "Be precise."},
            ],
        }
    ]


def test_assistant_tool_use_becomes_tool_calls_and_thinking_is_dropped() -> None:
    chat = messages_to_chat(
        {
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Two cities.", "signature": "c2ln"},
                        {"type": "text", "text": "Looking."},
                        {
                            "type": "tool_use",
                            "id": "toolu_01A",
                            "name": "weather",
                            "input": {"city": "Paris", "days": [1, 2], "unit": None},
                        },
                        {"type": "tool_use", "id": "toolu_01B", "name": "clock", "input": {}},
                    ],
                },
            ]
        }
    )
    assert chat["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Looking."}],
        "tool_calls": [
            {
                "id": "toolu_01A",
                "type": "function",
                "function": {
                    "name": "weather",
                    "arguments": '{"city":"Paris","days":[1,2],"unit":null}',
                },
            },
            {
                "id": "toolu_01B",
                "type": "function",
                "function": {"name": "clock", "arguments": "{}"},
            },
        ],
    }
    assert "Two cities." not in orjson.dumps(chat).decode()

    only_calls = messages_to_chat(
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}],
                }
            ]
        }
    )
    assert only_calls["messages"][0]["content"] is None


def test_tool_results_become_tool_messages_before_the_rest_of_the_turn() -> None:
    chat = messages_to_chat(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Here you go."},
                        {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "18 C"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_01B",
                            "content": [
                                {"type": "text", "text": "No such city."},
                                {"type": "text", "text": "Try again."},
                            ],
                            "is_error": True,
                        },
                        {"type": "tool_result", "tool_use_id": "toolu_01C"},
                    ],
                }
            ]
        }
    )
    assert chat["messages"] == [
        {"role": "tool", "tool_call_id": "toolu_01A", "content": "18 C"},
        {
            "role": "tool",
            "tool_call_id": "toolu_01B",
            "content": [
                {"type": "text", "text": "No such city."},
                {"type": "text", "text": "Try again."},
            ],
            "is_error": True,
        },
        {"role": "tool", "tool_call_id": "toolu_01C", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "Here you go."}]},
    ]


def test_tools_become_functions() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    chat = messages_to_chat(
        {
            "messages": [{"role": "user", "content": "Hi"}],
            "tools": [
                {"name": "weather", "description": "Today's weather.", "input_schema": schema},
                {"name": "clock", "input_schema": {"type": "object"}},
            ],
        }
    )
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Today's weather.",
                "parameters": schema,
            },
        },
        {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}},
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "weather"},
            {"tool_choice": {"type": "function", "function": {"name": "weather"}}},
        ),
        (
            {"type": "auto", "disable_parallel_tool_use": True},
            {"tool_choice": "auto", "parallel_tool_calls": False},
        ),
        (
            {"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
            {
                "tool_choice": {"type": "function", "function": {"name": "weather"}},
                "parallel_tool_calls": False,
            },
        ),
        ({"type": "any", "disable_parallel_tool_use": False}, {"tool_choice": "required"}),
    ],
)
def test_tool_choice_maps_to_the_chat_modes(
    choice: dict[str, Any], expected: dict[str, Any]
) -> None:
    tools = [{"name": "weather", "input_schema": {"type": "object"}}]
    chat = messages_to_chat(
        {"messages": [{"role": "user", "content": "Hi"}], "tools": tools, "tool_choice": choice}
    )
    assert {
        k: v for k, v in chat.items() if k in ("tool_choice", "parallel_tool_calls")
    } == expected


def test_sampling_fields_are_carried_and_top_k_is_dropped() -> None:
    chat = messages_to_chat(
        {
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "max_tokens": 200,
            "messages": [{"role": "user", "content": "Hi"}],
            "stop_sequences": ["\n\nHuman:", "END"],
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 40,
            "metadata": {"user_id": "user-42"},
            "stream": True,
            "unknown_field": 1,
        }
    )
    assert chat == {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "messages": [{"role": "user", "content": "Hi"}],
        "stop": ["\n\nHuman:", "END"],
        "max_tokens": 200,
        "temperature": 0.2,
        "top_p": 0.9,
        "stream": True,
        "user": "user-42",
    }
    bare = messages_to_chat(
        {"max_tokens": 5, "messages": [], "stop_sequences": [], "metadata": {"user_id": None}}
    )
    assert bare == {"max_tokens": 5, "messages": []}


@pytest.mark.parametrize(
    ("thinking", "expected"),
    [
        ({"type": "enabled", "budget_tokens": 2048}, True),
        ({"type": "disabled"}, False),
        (None, None),
    ],
)
def test_thinking_becomes_the_reasoning_switch(thinking: Any, expected: bool | None) -> None:
    request: dict[str, Any] = {"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    if thinking is not None:
        request["thinking"] = thinking
    chat = messages_to_chat(request)
    assert chat.get("enable_thinking", "absent") == ("absent" if expected is None else expected)


# --- chat request → Messages request (the inverse) ---


def test_a_chat_request_becomes_a_messages_request() -> None:
    request = {
        "model": "qwen",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C", "is_error": True},
            {"role": "user", "content": "Thanks. And now?"},
        ],
        "tools": [{"type": "function", "function": {"name": "weather"}}],
        "parallel_tool_calls": False,
        "stop": "END",
        "max_tokens": 300,
        "max_completion_tokens": 200,
        "user": "user-42",
        "enable_thinking": True,
        "seed": 7,
    }
    assert chat_to_messages(request) == {
        "model": "qwen",
        "system": [
            {"type": "text", "text": "Be brief."},
            {"type": "text", "text": "Use metric units."},
        ],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "weather",
                        "input": {"city": "Paris"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_1",
                        "content": "18 C",
                        "is_error": True,
                    },
                    {"type": "text", "text": "Thanks. And now?"},
                ],
            },
        ],
        "max_tokens": 200,
        "tools": [{"name": "weather", "input_schema": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "stop_sequences": ["END"],
        "metadata": {"user_id": "user-42"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }


# --- chat.completion → Message ---


def _completion(
    message: dict[str, Any], finish_reason: str | None = "stop", **extra: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "qwen-upstream",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, **extra}],
        "usage": {"prompt_tokens": 32, "completion_tokens": 13, "total_tokens": 45},
    }


def test_a_completion_becomes_a_message_with_thinking_text_then_tool_use() -> None:
    completion = _completion(
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "The user wants weather.",
            "tool_calls": [
                {
                    "id": "chatcmpl-tool-8f2c1a9b3d4e5f60",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        "tool_calls",
    )
    completion["usage"]["prompt_tokens_details"] = {"cached_tokens": 16}
    message = completion_to_message(completion, message_id="msg_0123456789abcdef01234567")
    assert message == {
        "id": "msg_0123456789abcdef01234567",
        "type": "message",
        "role": "assistant",
        "model": "qwen-upstream",
        "content": [
            {"type": "thinking", "thinking": "The user wants weather.", "signature": ""},
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_8f2c1a9b3d4e5f60",
                "name": "weather",
                "input": {"city": "Paris"},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 16,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 16,
            "output_tokens": 13,
        },
    }


def test_reasoning_is_read_from_either_field_and_empty_parts_make_no_block() -> None:
    newer = completion_to_message(
        _completion({"role": "assistant", "content": "Hi.", "reasoning": "Greet."}), message_id="m"
    )
    assert newer["content"] == [
        {"type": "thinking", "thinking": "Greet.", "signature": ""},
        {"type": "text", "text": "Hi."},
    ]
    both = completion_to_message(
        _completion(
            {
                "role": "assistant",
                "content": None,
                "reasoning": "Same.",
                "reasoning_content": "Same.",
            }
        ),
        message_id="m",
    )
    assert both["content"] == [{"type": "thinking", "thinking": "Same.", "signature": ""}]
    empty = completion_to_message(_completion({"role": "assistant", "content": ""}), message_id="m")
    assert empty["content"] == []
    assert empty["usage"] == {
        "input_tokens": 32,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 13,
    }


def test_tool_use_ids_keep_the_call_ids_tail_and_are_deterministic() -> None:
    assert tool_use_id("chatcmpl-tool-8f2c1a9b3d4e5f60", fallback="x") == "toolu_8f2c1a9b3d4e5f60"
    assert tool_use_id("call_Ab12Cd34Ef56", fallback="x") == "toolu_Ab12Cd34Ef56"
    assert tool_use_id("toolu_01ABCdefGHI", fallback="x") == "toolu_01ABCdefGHI"
    short = tool_use_id("call_0", fallback="x")
    assert short == "toolu_" + hashlib.sha256(b"call_0").hexdigest()[:24]
    assert short == tool_use_id("call_0", fallback="y") != tool_use_id("call_1", fallback="x")
    missing = tool_use_id(None, fallback="msg_1:0")
    assert missing == "toolu_" + hashlib.sha256(b"msg_1:0").hexdigest()[:24]
    assert missing != tool_use_id("", fallback="msg_1:1")


def test_tool_arguments_become_input_and_what_is_not_an_object_is_kept_aside() -> None:
    assert tool_input('{"city": "Paris", "n": 2}') == {"city": "Paris", "n": 2}
    assert tool_input("") == {}
    assert tool_input("  ") == {}
    assert tool_input(None) == {}
    assert tool_input('{"city": "Par') == {UNPARSED_ARGUMENTS_KEY: '{"city": "Par'}
    assert tool_input("[1, 2]") == {UNPARSED_ARGUMENTS_KEY: "[1, 2]"}
    assert tool_input('"Paris"') == {UNPARSED_ARGUMENTS_KEY: '"Paris"'}
    message = completion_to_message(
        _completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_Ab12Cd34Ef56",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{oops"},
                    },
                    {
                        "id": "call_Zz98Yy76Xx54",
                        "type": "function",
                        "function": {"name": "g", "arguments": ""},
                    },
                ],
            },
            "tool_calls",
        ),
        message_id="m",
    )
    assert [block["input"] for block in message["content"]] == [
        {UNPARSED_ARGUMENTS_KEY: "{oops"},
        {},
    ]


@pytest.mark.parametrize(
    ("finish_reason", "expected"),
    [
        ("stop", ("end_turn", None)),
        ("length", ("max_tokens", None)),
        ("tool_calls", ("tool_use", None)),
        ("content_filter", ("end_turn", None)),
        ("stopped", ("end_turn", None)),
        (None, ("end_turn", None)),
    ],
)
def test_finish_reasons_map_to_stop_reasons(
    finish_reason: str | None, expected: tuple[str, str | None]
) -> None:
    assert chat_stop_reason(finish_reason, "Some text.", ()) == expected
    assert chat_stop_reason(finish_reason, "Some text.", ["zzz"]) == expected


def test_a_stop_sequence_is_named_by_the_server_or_seen_at_the_end_of_the_text() -> None:
    stops = ["END", "\n\nHuman:", "Human:"]
    # vLLM names the stop string that stopped it, and strips it from the text.
    assert chat_stop_reason("stop", "The answer", stops, matched_stop="END") == (
        "stop_sequence",
        "END",
    )
    # A stop token id, or a string that was not one of the request's: the turn ended.
    assert chat_stop_reason("stop", "The answer", stops, matched_stop=151645) == ("end_turn", None)
    assert chat_stop_reason("stop", "The answer", stops, matched_stop="</s>") == ("end_turn", None)
    # A server that keeps the stop string: the longest one the text ends with.
    assert chat_stop_reason("stop", "Answer\n\nHuman:", stops) == ("stop_sequence", "\n\nHuman:")
    assert chat_stop_reason("stop", "Answer", stops) == ("end_turn", None)
    # Only a `stop` finish can be a stop sequence.
    assert chat_stop_reason("length", "Answer END", stops, matched_stop="END") == (
        "max_tokens",
        None,
    )

    message = completion_to_message(
        _completion({"role": "assistant", "content": "The answer"}, "stop", stop_reason="END"),
        message_id="m",
        stop_sequences=stops,
    )
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")


def test_a_stop_finish_with_tool_calls_is_tool_use() -> None:
    # vLLM finishes a call forced by a named tool_choice with "stop".
    message = completion_to_message(
        _completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_Ab12Cd34Ef56", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            "stop",
        ),
        message_id="m",
    )
    assert message["stop_reason"] == "tool_use"


def test_usage_moves_cached_tokens_out_of_input_tokens() -> None:
    completion = _completion({"role": "assistant", "content": "Hi."})
    completion["usage"] = {
        "prompt_tokens": 1000,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 960},
    }
    assert completion_to_message(completion, message_id="m")["usage"] == {
        "input_tokens": 40,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 960,
        "output_tokens": 7,
    }
    completion["usage"] = {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "prompt_tokens_details": None,
    }
    assert (
        completion_to_message(completion, message_id="m")["usage"]["cache_read_input_tokens"] == 0
    )
    del completion["usage"]
    assert completion_to_message(completion, message_id="m")["usage"] == {
        "input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }


# --- chunks → stream events ---


def _chunk(
    delta: dict[str, Any] | None = None, finish_reason: str | None = None, **choice: Any
) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason, **choice}],
    }


def _block_start(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    data = {"type": "content_block_start", "index": index, "content_block": block}
    return ("content_block_start", data)


def _block_delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def _block_stop(index: int) -> tuple[str, dict[str, Any]]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def test_a_stream_gives_anthropics_events_in_order() -> None:
    stream = MessageStream(
        message_id="msg_1", model="qwen", input_tokens=32, cache_read_input_tokens=0
    )
    events = stream.start()
    for chunk in [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"reasoning_content": "Think "}),
        _chunk({"reasoning_content": "hard."}),
        _chunk({"content": "Let me "}),
        _chunk({"content": "check."}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "chatcmpl-tool-0123456789abcdef",
                        "type": "function",
                        "function": {"name": "weather", "arguments": ""},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "chatcmpl-tool-fedcba9876543210",
                        "type": "function",
                        "function": {"name": "clock", "arguments": "{}"},
                    }
                ]
            }
        ),
        _chunk({"content": ""}, "tool_calls"),
        {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {
                "prompt_tokens": 40,
                "completion_tokens": 21,
                "prompt_tokens_details": {"cached_tokens": 32},
            },
        },
    ]:
        events += stream.feed(chunk)
    events += stream.finish()
    usage_at_start = {
        "input_tokens": 32,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
    }
    usage_at_end = {
        "input_tokens": 8,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 32,
        "output_tokens": 21,
    }
    weather = {"type": "tool_use", "id": "toolu_0123456789abcdef", "name": "weather", "input": {}}
    clock = {"type": "tool_use", "id": "toolu_fedcba9876543210", "name": "clock", "input": {}}
    assert events == [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "qwen",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage_at_start,
                },
            },
        ),
        _block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        _block_delta(0, {"type": "thinking_delta", "thinking": "Think "}),
        _block_delta(0, {"type": "thinking_delta", "thinking": "hard."}),
        _block_stop(0),
        _block_start(1, {"type": "text", "text": ""}),
        _block_delta(1, {"type": "text_delta", "text": "Let me "}),
        _block_delta(1, {"type": "text_delta", "text": "check."}),
        _block_stop(1),
        _block_start(2, weather),
        _block_delta(2, {"type": "input_json_delta", "partial_json": '{"city":"Paris"}'}),
        _block_stop(2),
        _block_start(3, clock),
        _block_delta(3, {"type": "input_json_delta", "partial_json": "{}"}),
        _block_stop(3),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": usage_at_end,
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_the_final_usage_is_the_servers_unless_the_caller_knows_better() -> None:
    def final_usage(chunks: list[dict[str, Any]], **finish: Any) -> Any:
        stream = MessageStream(message_id="m", model="q", input_tokens=5)
        stream.start()
        for chunk in chunks:
            stream.feed(chunk)
        return stream.finish(**finish)[-2][1]["usage"]

    text = [_chunk({"content": "Hi"}, "stop")]
    usage = {
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    assert final_usage(text) == {"output_tokens": 0}
    assert final_usage(text, output_tokens=3) == {"output_tokens": 3}
    server = {
        "input_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 2,
    }
    assert final_usage([*text, usage]) == server
    assert final_usage([*text, usage], output_tokens=9) == {**server, "output_tokens": 9}
    estimate = {"prompt_tokens": 6, "completion_tokens": 4}
    assert final_usage([*text, usage], usage=estimate) == {
        **server,
        "input_tokens": 6,
        "output_tokens": 4,
    }


def test_a_stream_names_the_stop_sequence_and_the_caller_may_override_the_finish() -> None:
    stream = MessageStream(
        message_id="m", model="q", input_tokens=5, stop_sequences=["END", "\n\nHuman:"]
    )
    stream.start()
    stream.feed(_chunk({"content": "Answer\n\nHu"}))
    stream.feed(_chunk({"content": "man:"}, "stop"))
    assert stream.finish()[-2][1]["delta"] == {
        "stop_reason": "stop_sequence",
        "stop_sequence": "\n\nHuman:",
    }

    vllm = MessageStream(message_id="m", model="q", input_tokens=5, stop_sequences=["END"])
    vllm.start()
    vllm.feed(_chunk({"content": "Answer"}, "stop", stop_reason="END"))
    assert vllm.finish()[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}

    cut = MessageStream(message_id="m", model="q", input_tokens=5)
    cut.start()
    cut.feed(_chunk({"content": "Answer"}))
    events = cut.finish(finish_reason="length")
    assert [name for name, _ in events] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[1][1]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert cut.finish() == []
    assert cut.feed(_chunk({"content": "more"})) == []


def test_broken_tool_arguments_reach_the_client_as_one_parseable_input() -> None:
    stream = MessageStream(message_id="msg_x", model="q", input_tokens=5)
    stream.start()
    stream.feed(
        _chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": '{"a": '}}]})
    )
    stream.feed(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "oops"}}]}))
    events = stream.finish(finish_reason="tool_calls")
    start, delta, stop = events[0][1], events[1][1], events[2][1]
    assert start["content_block"] == {
        "type": "tool_use",
        "id": tool_use_id(None, fallback="msg_x:0"),
        "name": "f",
        "input": {},
    }
    assert orjson.loads(delta["delta"]["partial_json"]) == {UNPARSED_ARGUMENTS_KEY: '{"a": oops'}
    assert stop == {"type": "content_block_stop", "index": 0}


def test_calls_without_an_index_are_told_apart_by_their_ids() -> None:
    stream = MessageStream(message_id="m", model="q", input_tokens=5)
    stream.start()
    for call_id, name in (("call_Ab12Cd34Ef56", "f"), ("call_Zz98Yy76Xx54", "g")):
        stream.feed(
            _chunk(
                {
                    "tool_calls": [
                        {"id": call_id, "function": {"name": name, "arguments": '{"x": 1}'}}
                    ]
                }
            )
        )
    blocks = [
        data["content_block"] for name, data in stream.finish() if name == "content_block_start"
    ]
    assert [(b["id"], b["name"]) for b in blocks] == [
        ("toolu_Ab12Cd34Ef56", "f"),
        ("toolu_Zz98Yy76Xx54", "g"),
    ]


def test_an_event_is_encoded_as_anthropic_writes_it() -> None:
    data = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Hé\n"},
    }
    assert encode_event("content_block_delta", data) == (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"H\xc3\xa9\\n"}}\n\n'
    )


# --- properties: a Messages conversation there and back ---

TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)
NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,8}", fullmatch=True)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=8,
)
TOOL_INPUTS = st.dictionaries(TEXT, JSON_VALUES, max_size=4)
IMAGES = st.builds(
    lambda media, data: {
        "type": "image",
        "source": {"type": "base64", "media_type": media, "data": data},
    },
    st.sampled_from(["image/png", "image/jpeg", "image/webp", "image/gif"]),
    st.sampled_from([PNG, "R0lGODlhAQABAAAAACw=", "/9j/4AAQSkZJRg=="]),
)


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@st.composite
def messages_requests(draw: st.DrawFn) -> dict[str, Any]:
    tool_names = draw(st.lists(NAMES, max_size=3, unique=True))
    turns: list[dict[str, Any]] = []
    open_calls: list[str] = []
    for position in range(draw(st.integers(1, 6))):
        if position % 2 == 0:  # a user turn: the answers to the last calls first
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": draw(st.one_of(TEXT, st.lists(TEXT.map(_text_block), max_size=2))),
                    **({"is_error": True} if draw(st.booleans()) else {}),
                }
                for call_id in open_calls
            ]
            rest = draw(
                st.lists(
                    st.one_of(TEXT.map(_text_block), IMAGES),
                    min_size=0 if results else 1,
                    max_size=3,
                )
            )
            content: Any = results + rest
            if not results and len(rest) == 1 and rest[0]["type"] == "text" and draw(st.booleans()):
                content = rest[0]["text"]
            open_calls = []
        else:
            thinking = (
                [{"type": "thinking", "thinking": draw(TEXT), "signature": "c2ln"}]
                if draw(st.booleans())
                else []
            )
            texts = draw(st.lists(TEXT.map(_text_block), max_size=2))
            calls = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{position}{i}x",
                    "name": draw(st.sampled_from(tool_names)),
                    "input": draw(TOOL_INPUTS),
                }
                for i in range(draw(st.integers(0, 2)) if tool_names else 0)
            ]
            open_calls = [call["id"] for call in calls]
            content = thinking + texts + calls
            if not content or (
                not thinking and not calls and len(texts) == 1 and draw(st.booleans())
            ):
                content = texts[0]["text"] if texts else draw(TEXT)
        turns.append({"role": "user" if position % 2 == 0 else "assistant", "content": content})
    request: dict[str, Any] = {
        "model": "qwen",
        "max_tokens": draw(st.integers(1, 4096)),
        "messages": turns,
    }
    system = draw(
        st.one_of(st.none(), TEXT, st.lists(TEXT.map(_text_block), min_size=1, max_size=2))
    )
    if system is not None:
        request["system"] = system
    if tool_names:
        request["tools"] = [
            {
                "name": name,
                "input_schema": {"type": "object", "properties": {draw(TEXT): {"type": "string"}}},
            }
            | ({"description": draw(TEXT)} if draw(st.booleans()) else {})
            for name in tool_names
        ]
        choice = draw(st.sampled_from(["absent", "auto", "any", "none", "tool"]))
        if choice == "tool":
            request["tool_choice"] = {"type": "tool", "name": draw(st.sampled_from(tool_names))}
        elif choice != "absent":
            request["tool_choice"] = {"type": choice}
        if choice not in ("absent", "none") and draw(st.booleans()):
            request["tool_choice"]["disable_parallel_tool_use"] = True
    optional = {
        "stop_sequences": st.lists(TEXT, min_size=1, max_size=3),
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0, 1),
        "top_k": st.integers(1, 100),
        "stream": st.booleans(),
        "metadata": TEXT.map(lambda user: {"user_id": user}),
        "thinking": st.one_of(
            st.integers(1024, 4000).map(lambda n: {"type": "enabled", "budget_tokens": n}),
            st.just({"type": "disabled"}),
        ),
    }
    for field, values in optional.items():
        if draw(st.booleans()):
            request[field] = draw(values)
    return request


def _meaning_of_block(block: dict[str, Any]) -> tuple[Any, ...] | None:
    kind = block["type"]
    if kind == "text":
        return ("text", block["text"]) if block["text"] else None
    if kind == "image":
        return ("image", block["source"]["media_type"], block["source"]["data"])
    if kind == "tool_use":
        return (
            "tool_use",
            block["id"],
            block["name"],
            orjson.dumps(block["input"], option=orjson.OPT_SORT_KEYS),
        )
    if kind == "tool_result":
        content = block.get("content", "")
        texts = [content] if isinstance(content, str) else [b["text"] for b in content]
        return (
            "tool_result",
            block["tool_use_id"],
            tuple(t for t in texts if t),
            block.get("is_error", False),
        )
    return None  # thinking: not part of a prompt's meaning on a chat model server


def _meaning_of_messages_request(request: dict[str, Any]) -> dict[str, Any]:
    """What a Messages request says, without the spellings that legitimately change."""
    turns: list[tuple[str, list[Any]]] = []
    for turn in request["messages"]:
        content = turn["content"]
        blocks = [_text_block(content)] if isinstance(content, str) else content
        meaning = [m for m in map(_meaning_of_block, blocks) if m is not None]
        if turns and turns[-1][0] == turn["role"]:
            turns[-1][1].extend(meaning)  # Anthropic reads consecutive turns of a role as one
        else:
            turns.append((turn["role"], meaning))
    system = request.get("system")
    choice = request.get("tool_choice")
    return {
        "model": request.get("model"),
        "system": [system] if isinstance(system, str) else [b["text"] for b in system or ()],
        "turns": turns,
        "tools": [
            (t["name"], t.get("description"), t["input_schema"]) for t in request.get("tools") or ()
        ],
        "tool_choice": None
        if choice is None
        else (choice["type"], choice.get("name"), choice.get("disable_parallel_tool_use", False)),
        "stop": request.get("stop_sequences") or [],
        "sampling": {k: request.get(k) for k in ("max_tokens", "temperature", "top_p", "stream")},
        "user": (request.get("metadata") or {}).get("user_id"),
        "thinking": (request.get("thinking") or {}).get("type"),
    }


@settings(max_examples=300)
@given(messages_requests())
def test_a_messages_request_there_and_back_keeps_its_meaning(request: dict[str, Any]) -> None:
    chat = messages_to_chat(request)
    assert "top_k" not in chat
    validate_chat_request(chat)  # what the chat contract accepts, so the pipeline can run it
    assert all(m["role"] in ("system", "user", "assistant", "tool") for m in chat["messages"])
    back = chat_to_messages(chat)
    assert _meaning_of_messages_request(back) == _meaning_of_messages_request(request)
    # Every tool result answers a call made in the assistant message before it.
    called: set[str] = set()
    for message in chat["messages"]:
        if message["role"] == "assistant":
            called = {call["id"] for call in message.get("tool_calls") or ()}
        elif message["role"] == "tool":
            assert message["tool_call_id"] in called


# --- properties: a chat request there and back ---

PARTS_TEXT = TEXT.map(lambda text: {"type": "text", "text": text})


@st.composite
def chat_requests(draw: st.DrawFn) -> dict[str, Any]:
    function_names = draw(st.lists(NAMES, max_size=3, unique=True))
    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 2))):
        role = draw(st.sampled_from(["system", "developer"]))
        messages.append(
            {
                "role": role,
                "content": draw(st.one_of(TEXT, st.lists(PARTS_TEXT, min_size=1, max_size=2))),
            }
        )
    for position in range(draw(st.integers(1, 6))):
        if position % 2 == 0:
            image = IMAGES.map(
                lambda b: {
                    "type": "image_url",
                    "image_url": {
                        "url": f"data:{b['source']['media_type']};base64,{b['source']['data']}"
                    },
                }
            )
            content = draw(
                st.one_of(TEXT, st.lists(st.one_of(PARTS_TEXT, image), min_size=1, max_size=3))
            )
            messages.append({"role": "user", "content": content})
            continue
        calls = [
            {
                "id": f"call_{position}{i}",
                "type": "function",
                "function": {
                    "name": draw(st.sampled_from(function_names)),
                    "arguments": orjson.dumps(draw(TOOL_INPUTS)).decode(),
                },
            }
            for i in range(draw(st.integers(0, 2)) if function_names else 0)
        ]
        if calls:
            assistant: dict[str, Any] = {"role": "assistant", "tool_calls": calls}
            content = draw(st.one_of(st.none(), TEXT, st.lists(PARTS_TEXT, max_size=2)))
            if content is not None or draw(st.booleans()):
                assistant["content"] = content
            messages.append(assistant)
            for call in calls:
                tool: dict[str, Any] = {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": draw(st.one_of(TEXT, st.lists(PARTS_TEXT, min_size=1, max_size=2))),
                }
                if draw(st.booleans()):
                    tool["is_error"] = True
                messages.append(tool)
        else:
            messages.append(
                {
                    "role": "assistant",
                    "content": draw(st.one_of(TEXT, st.lists(PARTS_TEXT, min_size=1, max_size=2))),
                }
            )
    request: dict[str, Any] = {"model": "qwen", "messages": messages}
    if function_names:
        request["tools"] = [
            {
                "type": "function",
                "function": {"name": name}
                | ({"description": draw(TEXT)} if draw(st.booleans()) else {})
                | (
                    {"parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}
                    if draw(st.booleans())
                    else {}
                ),
            }
            for name in function_names
        ]
        choice = draw(st.sampled_from(["absent", "auto", "required", "none", "named"]))
        if choice == "named":
            request["tool_choice"] = {
                "type": "function",
                "function": {"name": draw(st.sampled_from(function_names))},
            }
        elif choice != "absent":
            request["tool_choice"] = choice
        if draw(st.booleans()):
            request["parallel_tool_calls"] = draw(st.booleans())
    optional = {
        "max_tokens": st.integers(1, 4096),
        "max_completion_tokens": st.integers(1, 4096),
        "stop": st.one_of(TEXT, st.lists(TEXT, min_size=1, max_size=3)),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "stream": st.booleans(),
        "user": TEXT,
        "enable_thinking": st.booleans(),
    }
    for field, values in optional.items():
        if draw(st.booleans()):
            request[field] = draw(values)
    return request


def _texts(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content] if content else []
    return [part["text"] for part in content if part["type"] == "text" and part["text"]]


def _meaning_of_chat_part(part: dict[str, Any]) -> tuple[str, str]:
    return ("text", part["text"]) if part["type"] == "text" else ("image", part["image_url"]["url"])


def _meaning_of_chat_request(request: dict[str, Any]) -> dict[str, Any]:
    """What a chat request says, without the spellings that legitimately change."""
    system: list[str] = []
    messages: list[tuple[Any, ...]] = []
    for message in request["messages"]:
        role, content = message["role"], message.get("content")
        if role in ("system", "developer"):
            system += _texts(content)
        elif role == "user":
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
            messages.append(("user", [_meaning_of_chat_part(p) for p in parts]))
        elif role == "assistant":
            calls = [
                (c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"]))
                for c in message.get("tool_calls") or ()
            ]
            messages.append(("assistant", _texts(content), calls))
        else:
            messages.append(
                ("tool", message["tool_call_id"], _texts(content), message.get("is_error", False))
            )
    tools = request.get("tools") or []
    choice = request.get("tool_choice", "auto" if tools else None)
    parallel = request.get("parallel_tool_calls") is not False or choice == "none"
    caps = [request[k] for k in ("max_tokens", "max_completion_tokens") if k in request]
    stop = request.get("stop")
    return {
        "model": request.get("model"),
        "system": system,
        "messages": messages,
        "tools": [
            (
                t["function"]["name"],
                t["function"].get("description"),
                t["function"].get("parameters", {"type": "object", "properties": {}}),
            )
            for t in tools
        ],
        "tool_choice": (choice, parallel if tools else None),
        "stop": [stop] if isinstance(stop, str) else stop or [],
        "max_tokens": min(caps) if caps else None,
        "sampling": {
            k: request.get(k) for k in ("temperature", "top_p", "stream", "user", "enable_thinking")
        },
    }


@settings(max_examples=300)
@given(chat_requests())
def test_a_chat_request_there_and_back_keeps_its_meaning(request: dict[str, Any]) -> None:
    messages = chat_to_messages(request)
    assert [turn["role"] for turn in messages["messages"]][::2] == ["user"] * len(
        messages["messages"][::2]
    )
    back = messages_to_chat(messages)
    assert _meaning_of_chat_request(back) == _meaning_of_chat_request(request)


# --- properties: a reply, as JSON and as a stream ---

CALL_IDS = st.one_of(
    st.from_regex(r"chatcmpl-tool-[0-9a-f]{16}", fullmatch=True),
    st.from_regex(r"call_[A-Za-z0-9]{1,12}", fullmatch=True),
    st.none(),
)
ARGUMENTS = st.one_of(
    TOOL_INPUTS.map(lambda value: orjson.dumps(value).decode()),
    TOOL_INPUTS.map(lambda value: orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()),
    st.sampled_from(["", " ", '{"city": "Par', "[1, 2]", '"Paris"', "{oops}", "null"]),
)


@st.composite
def replies(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    stop_sequences = draw(st.lists(TEXT, max_size=3, unique=True))
    message: dict[str, Any] = {
        "role": "assistant",
        "content": draw(st.one_of(st.none(), st.just(""), TEXT)),
    }
    if stop_sequences and message["content"] and draw(st.booleans()):
        message["content"] += draw(st.sampled_from(stop_sequences))  # a server that kept it
    reasoning = draw(st.one_of(st.none(), TEXT))
    if reasoning is not None:
        message[draw(st.sampled_from(["reasoning_content", "reasoning"]))] = reasoning
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": draw(NAMES), "arguments": draw(ARGUMENTS)},
        }
        for call_id in draw(st.lists(CALL_IDS, max_size=3))
    ]
    if calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if v is not None} for c in calls]
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": draw(
            st.sampled_from(["stop", "length", "tool_calls", "content_filter", None])
        ),
    }
    if draw(st.booleans()):
        choice["stop_reason"] = draw(
            st.one_of(
                st.integers(0, 200000),
                st.sampled_from(stop_sequences) if stop_sequences else st.none(),
            )
        )
    completion: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "qwen",
        "choices": [choice],
    }
    if draw(st.booleans()):
        prompt = draw(st.integers(0, 5000))
        completion["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": draw(st.integers(0, 5000)),
            "prompt_tokens_details": {"cached_tokens": draw(st.integers(0, prompt))},
        }
    return completion, stop_sequences


def _pieces(draw: st.DrawFn, text: str) -> list[str]:
    cuts = (
        sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=4)))
        if len(text) > 1
        else []
    )
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if a < b]


@st.composite
def chunked(draw: st.DrawFn, completion: dict[str, Any]) -> list[dict[str, Any]]:
    """The same reply as a model server streams it, cut at arbitrary places."""
    choice = completion["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    for field in ("reasoning_content", "reasoning"):
        deltas += [{field: piece} for piece in _pieces(draw, message.get(field) or "")]
    deltas += [{"content": piece} for piece in _pieces(draw, message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or ()):
        arguments = _pieces(draw, call["function"]["arguments"])
        first = {
            "index": index,
            "type": "function",
            "function": {
                "name": call["function"]["name"],
                "arguments": arguments[0] if arguments and draw(st.booleans()) else "",
            },
        }
        if "id" in call:
            first["id"] = call["id"]
        rest = arguments[1:] if first["function"]["arguments"] else arguments
        deltas += [{"tool_calls": [first]}] + [
            {"tool_calls": [{"index": index, "function": {"arguments": piece}}]} for piece in rest
        ]
    chunks = [
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": d, "finish_reason": None}],
        }
        for d in deltas
    ]
    last = chunks[-1]["choices"][0]
    last["finish_reason"] = choice["finish_reason"]
    if "stop_reason" in choice:
        last["stop_reason"] = choice["stop_reason"]
    if "usage" in completion:
        chunks.append(
            {"object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]}
        )
    return chunks


def _reassemble(
    events: list[tuple[str, dict[str, Any]]],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """What an Anthropic client builds from the events, checking their order as it goes."""
    assert events[0][0] == "message_start" and events[-1] == (
        "message_stop",
        {"type": "message_stop"},
    )
    assert events[-2][0] == "message_delta"
    blocks: list[dict[str, Any]] = []
    json_text: dict[int, str] = {}
    open_index: int | None = None
    for name, data in events[1:-2]:
        assert data["type"] == name
        if name == "content_block_start":
            assert open_index is None and data["index"] == len(blocks)
            open_index = data["index"]
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            assert data["index"] == open_index
            block, delta = blocks[data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                assert delta["type"] == "input_json_delta"
                json_text[data["index"]] = json_text.get(data["index"], "") + delta["partial_json"]
                # The anthropic SDK parses every prefix as partial JSON (jiter): it must parse.
                block["input"] = pydantic_core.from_json(
                    json_text[data["index"]], allow_partial=True
                )
        else:
            assert name == "content_block_stop" and data["index"] == open_index
            open_index = None
    assert open_index is None
    return blocks, events[-2][1]


@settings(max_examples=300)
@given(st.data())
def test_a_streamed_reply_reassembles_into_the_json_reply(data: st.DataObject) -> None:
    completion, stop_sequences = data.draw(replies())
    message = completion_to_message(
        completion, message_id="msg_0123456789abcdef01234567", stop_sequences=stop_sequences
    )
    stream = MessageStream(
        message_id="msg_0123456789abcdef01234567",
        model="qwen",
        input_tokens=7,
        stop_sequences=stop_sequences,
    )
    events = stream.start()
    for chunk in data.draw(chunked(completion)):
        events += stream.feed(chunk)
    events += stream.finish()
    start = events[0][1]["message"]
    assert (start["id"], start["model"], start["content"], start["usage"]["input_tokens"]) == (
        message["id"],
        "qwen",
        [],
        7,
    )
    blocks, message_delta = _reassemble(events)
    assert blocks == message["content"]
    assert message_delta["delta"] == {
        "stop_reason": message["stop_reason"],
        "stop_sequence": message["stop_sequence"],
    }
    expected_usage = message["usage"] if "usage" in completion else {"output_tokens": 0}
    assert message_delta["usage"] == expected_usage
    # Every event is one line of compact JSON after its name.
    for name, payload in events:
        encoded = encode_event(name, payload)
        assert encoded.count(b"\n") == 3 and orjson.loads(encoded.split(b"data: ", 1)[1]) == payload
