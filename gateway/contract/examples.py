"""The documented examples of chat completions, for /v1/openapi.json and its docs."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import JsonValue
from pydantic.config import JsonDict

MODEL = "Qwen/Qwen2.5-7B-Instruct"
QUESTION = {"role": "user", "content": "What does max_tokens limit?"}
WEATHER_QUESTION = {"role": "user", "content": "What is the weather in Paris?"}
GET_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
WEATHER_CALL = {
    "id": "call_8e1f3a5c7b9d2e4f6a8c0b1d",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
}

CHAT_REQUESTS: dict[str, dict[str, Any]] = {
    "json": {
        "summary": "One JSON reply",
        "value": {
            "model": MODEL,
            "messages": [
                {
                    "role": "system",
                    "content": "You are a concise assistant for an inference platform.",
                },
                QUESTION,
            ],
            "max_tokens": 200,
            "stream": False,
        },
    },
    "stream": {
        "summary": "A streamed reply with usage (`stream` left out streams)",
        "value": {
            "messages": [QUESTION],
            "max_tokens": 200,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    },
    "tools": {
        "summary": "Call tools",
        "value": {"messages": [WEATHER_QUESTION], "tools": [GET_WEATHER], "stream": False},
    },
    "tool_result": {
        "summary": "Send a tool's result back with the call that asked for it",
        "value": {
            "messages": [
                WEATHER_QUESTION,
                {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
                {
                    "role": "tool",
                    "tool_call_id": WEATHER_CALL["id"],
                    "content": '{"temp_c": 21, "sky": "clear"}',
                },
            ],
            "tools": [GET_WEATHER],
            "stream": False,
        },
    },
}
CHAT_REQUEST_EXAMPLES = [example["value"] for example in CHAT_REQUESTS.values()]

CHAT_COMPLETIONS: dict[str, dict[str, Any]] = {
    "text": {
        "summary": "A reply in text",
        "value": {
            "id": "chatcmpl-9b2f4d6e8a0c4b1d3f5e7a9c",
            "object": "chat.completion",
            "created": 1767225600,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "It caps how many tokens the model may generate for this reply.",
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 32, "completion_tokens": 13, "total_tokens": 45},
        },
    },
    "tool_calls": {
        "summary": "A reply that calls tools",
        "value": {
            "id": "chatcmpl-4d6f8a0c2e4b6d8f0a2c4e6b",
            "object": "chat.completion",
            "created": 1767225600,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
                    "logprobs": None,
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 61, "completion_tokens": 9, "total_tokens": 70},
        },
    },
}

_CHUNK: JsonDict = {
    "id": "chatcmpl-7c9e1a3b5d0f2c4e6a8b0d2f",
    "object": "chat.completion.chunk",
    "created": 1767225600,
    "model": MODEL,
}
CHUNK_EXAMPLES: list[JsonValue] = [
    {
        **_CHUNK,
        "choices": [
            {"index": 0, "delta": {"role": "assistant"}, "logprobs": None, "finish_reason": None}
        ],
    },
    {
        **_CHUNK,
        "choices": [
            {
                "index": 0,
                "delta": {"content": "It caps how"},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    },
    {**_CHUNK, "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop"}]},
    {
        **_CHUNK,
        "choices": [],
        "usage": {"prompt_tokens": 17, "completion_tokens": 13, "total_tokens": 30},
    },
]
# The stream those chunks make on the wire (with the usage chunk a client asks for).
EVENT_STREAM_EXAMPLE = (
    "".join(f"data: {orjson.dumps(chunk).decode()}\n\n" for chunk in CHUNK_EXAMPLES)
    + "data: [DONE]\n\n"
)

MODEL_NOT_FOUND = {
    "error": {
        "message": "The model `gpt-4o` does not exist.",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
}
STOPPED: JsonDict = {"stopped": True, "id": "chatcmpl-1e3a5c7b9d0f2a4c6e8b0d1f"}
NOT_RUNNING: JsonDict = {"stopped": False, "id": "chatcmpl-1e3a5c7b9d0f2a4c6e8b0d1f"}
MODEL_LIST: JsonDict = {
    "object": "list",
    "data": [
        {
            "id": MODEL,
            "object": "model",
            "created": 1767225600,
            "owned_by": "mortar",
            "context_window": 4096,
            "vision": False,
            "deployed": True,
        }
    ],
}
