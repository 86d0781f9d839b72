"""Turn a raw chat-completions body into a ``ChatRequest``, or refuse it with the right code.

The body is decoded by orjson (strict UTF-8, no lone surrogates: Postgres cannot store one) and
validated by the declared request schema (`request.py`) in strict mode; a refusal is the first
refused field's error from the one table in `refusals.py`. What the pipeline gets is the
normalized `ChatRequest`: `developer` is `system` (OpenAI's newer name for it, which many
models' chat templates do not know), text parts are joined with line breaks and other parts
dropped (the parts of a message with an image are kept aside for a model with vision,
`images.py`), the sampling fields are kept as sent, and the smaller of the two output caps wins.
"""

from __future__ import annotations

from typing import Any, TypeGuard, cast

import orjson
from pydantic import ValidationError

from gateway.contract.chat import ChatRequest
from gateway.contract.messages import ROLE_ALIASES, AnyPart, Content, Message, TextPart
from gateway.contract.refusals import refusal_for
from gateway.contract.request import Tool, chat_request_schema
from gateway.errors import InvalidJson

# The fields passed to a model server as they were sent, in this order.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "stop",
    "seed",
    "logprobs",
    "top_logprobs",
    "response_format",
)

# Roles whose messages, with text content and nothing else, need no normalizing.
_AS_SENT = frozenset({"system", "user", "assistant"})

_validate = chat_request_schema.validate_python


def parse_json_body(body: bytes) -> dict[str, Any]:
    """Decode the body: strict UTF-8 (no lone surrogates), one JSON object."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        reason = "is not valid UTF-8" if "utf-8" in str(exc).lower() else "is not valid JSON"
        raise InvalidJson(f"The request body {reason}: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidJson("The request body must be a JSON object.")
    return data


def validate_chat_request(data: dict[str, Any]) -> ChatRequest:
    """The request `data` asks for, normalized; raise an InvalidRequest to refuse it."""
    try:
        request = _validate(data)
    except ValidationError as invalid:
        raise refusal_for(invalid) from None
    caps = [
        cap
        for cap in (request.get("max_tokens"), request.get("max_completion_tokens"))
        if cap is not None
    ]
    model, tools, options = (
        request.get("model"),
        request.get("tools"),
        request.get("stream_options"),
    )
    messages = request["messages"]
    return ChatRequest(
        model=None if model is None else model.strip(),
        messages=[_message(message) for message in messages],
        tools=None if tools is None else [_tool(tool) for tool in tools],
        # A named choice is validated down to what it names.
        tool_choice=request.get("tool_choice"),
        parallel_tool_calls=request.get("parallel_tool_calls"),
        stream=request.get("stream"),
        include_usage=options is not None and options.get("include_usage") is True,
        max_tokens=min(caps) if caps else None,
        user=request.get("user"),
        # Valid, so passed on exactly as sent (`1` stays `1`, and `response_format` whole).
        sampling={name: data[name] for name in SAMPLING_FIELDS if data.get(name) is not None},
        image_parts=_image_parts(messages),
        sent=data,
    )


def _message(message: Message) -> dict[str, Any]:
    role = message["role"]
    if len(message) == 2 and role in _AS_SENT and type(message.get("content")) is str:
        # Validated into a new {"role", "content"} dict: nothing to normalize.
        return cast("dict[str, Any]", message)
    normalized: dict[str, Any] = {"role": ROLE_ALIASES.get(role, role)}
    calls = message.get("tool_calls")
    if calls:  # only an assistant message has any: the schema refuses them on the others
        normalized["tool_calls"] = [
            {"id": call["id"], "type": "function", "function": call["function"]} for call in calls
        ]
    content = message.get("content")
    normalized["content"] = content if content is None else _text(content)
    if message["role"] == "tool":
        normalized["tool_call_id"] = message["tool_call_id"]
    return normalized


def _text(content: Content) -> str:
    if isinstance(content, str):
        return content
    # Parts without text (images, audio, …) are dropped: a model without vision reads text
    # only. A model with vision gets its image parts back (`ChatRequest.image_parts`).
    return "\n".join(part["text"] for part in content if _is_text(part))


def _is_text(part: AnyPart) -> TypeGuard[TextPart]:
    return part["type"] == "text"


def _image_parts(messages: list[Message]) -> dict[int, list[AnyPart]]:
    """The content parts of each message with an image part, by the message's index."""
    found: dict[int, list[AnyPart]] = {}
    for index, message in enumerate(messages):
        content = message.get("content")
        if type(content) is list and any(part["type"] == "image_url" for part in content):
            found[index] = content
    return found


def _tool(tool: Tool) -> dict[str, Any]:
    """The tool with only the documented function fields that were given."""
    function = {key: value for key, value in tool["function"].items() if value is not None}
    return {"type": "function", "function": function}
