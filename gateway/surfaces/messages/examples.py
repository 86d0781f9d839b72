"""Examples of the Messages route, for /v1/openapi.json and its docs.

The conversations are the chat contract's (`gateway.contract.examples`), so the same question
costs the same on both routes: with the examples' system prompt, 32 input tokens and a 13-token
reply from the scripted model.
"""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

from gateway.contract.examples import MODEL
from gateway.surfaces.messages.translate import encode_event

SYSTEM = "You are a concise assistant for an inference platform."
QUESTION = {"role": "user", "content": "What does max_tokens limit?"}
WEATHER_QUESTION = {"role": "user", "content": "What is the weather in Paris?"}
GET_WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
WEATHER_CALL = {
    "type": "tool_use",
    "id": "toolu_8e1f3a5c7b9d2e4f6a8c0b1d",
    "name": "get_weather",
    "input": {"city": "Paris"},
}
REPLY = "It caps how many tokens the model may generate for this reply."

MESSAGES_REQUESTS: dict[str, dict[str, Any]] = {
    "json": {
        "summary": "One Message",
        "value": {"model": MODEL, "max_tokens": 200, "system": SYSTEM, "messages": [QUESTION]},
    },
    "stream": {
        "summary": "A streamed reply (Anthropic's events)",
        "value": {"model": MODEL, "max_tokens": 200, "messages": [QUESTION], "stream": True},
    },
    "tools": {
        "summary": "Call tools",
        "value": {
            "model": MODEL,
            "max_tokens": 200,
            "messages": [WEATHER_QUESTION],
            "tools": [GET_WEATHER],
        },
    },
    "tool_result": {
        "summary": "Send a tool's result back with the call that asked for it",
        "value": {
            "model": MODEL,
            "max_tokens": 200,
            "messages": [
                WEATHER_QUESTION,
                {"role": "assistant", "content": [WEATHER_CALL]},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": WEATHER_CALL["id"],
                            "content": '{"temp_c": 21, "sky": "clear"}',
                        }
                    ],
                },
            ],
            "tools": [GET_WEATHER],
        },
    },
}
MESSAGES_REQUEST_EXAMPLES = [example["value"] for example in MESSAGES_REQUESTS.values()]

COUNT_TOKENS_REQUESTS: dict[str, dict[str, Any]] = {
    "question": {
        "summary": "The question the Message example asks (32 tokens)",
        "value": {"model": MODEL, "system": SYSTEM, "messages": [QUESTION]},
    },
}
TOKEN_COUNT: dict[str, Any] = {"input_tokens": 32}

_USAGE: dict[str, JsonValue] = {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
MESSAGES: dict[str, dict[str, Any]] = {
    "text": {
        "summary": "A reply in text",
        "value": {
            "id": "msg_9b2f4d6e8a0c4b1d3f5e7a9c",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [{"type": "text", "text": REPLY}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 32, **_USAGE, "output_tokens": 13},
        },
    },
    "tool_use": {
        "summary": "A reply that calls tools",
        "value": {
            "id": "msg_4d6f8a0c2e4b6d8f0a2c4e6b",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [WEATHER_CALL],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 61, **_USAGE, "output_tokens": 9},
        },
    },
}

_STARTED: dict[str, JsonValue] = {
    "id": "msg_7c9e1a3b5d0f2c4e6a8b0d2f",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 17, **_USAGE, "output_tokens": 1},
}
STREAM_EVENTS: list[tuple[str, dict[str, JsonValue]]] = [
    ("message_start", {"type": "message_start", "message": _STARTED}),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "It caps how"},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"input_tokens": 17, **_USAGE, "output_tokens": 13},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
]
# The stream those events make on the wire, with the ping a quiet model server brings.
EVENT_STREAM_EXAMPLE = (
    "".join(encode_event(name, data).decode() for name, data in STREAM_EVENTS[:3])
    + 'event: ping\ndata: {"type": "ping"}\n\n'
    + "".join(encode_event(name, data).decode() for name, data in STREAM_EVENTS[3:])
)

NOT_FOUND = {
    "type": "error",
    "error": {"type": "not_found_error", "message": "The model `claude-opus-4` does not exist."},
}
