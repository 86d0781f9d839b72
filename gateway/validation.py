"""Turn a raw chat-completions body into a ``ChatRequest``, or refuse it with the right code.

The rules are the spec's request-body table (``spec/mortar-chat-completions.md``) with
PRODUCT.md's decisions: ``developer`` is ``system`` (2), content parts are joined with line
breaks and non-text parts dropped for models without vision (4), unknown fields are ignored and
sampling fields range-checked (5), both output caps accepted and the smaller wins (6), invalid
UTF-8 or JSON is a 400 (7). Fields set to ``null`` count as absent (Sevren).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.errors import (
    InvalidJson,
    InvalidParameter,
    InvalidRole,
    InvalidToolChoice,
    InvalidTools,
)

MAX_MESSAGES = 512
MAX_TOOLS = 128
MAX_TOOL_CALLS = 128
MAX_STOP_SEQUENCES = 16
ROLES = {"system", "user", "assistant", "tool"}
ROLE_ALIASES = {"developer": "system"}
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOOL_CHOICE_MODES = {"none", "auto", "required"}

# name -> (low, high) for numbers that reach a model server (Arkor's ranges).
NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}


@dataclass
class ChatRequest:
    """A validated request: what the pipeline plans, generates and forwards from."""

    model: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = None
    include_usage: bool = False
    max_tokens: int | None = None
    user: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)

    @property
    def named_tool(self) -> str | None:
        if isinstance(self.tool_choice, dict):
            return self.tool_choice["function"]["name"]
        return None


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
    body = {key: value for key, value in data.items() if value is not None}

    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise InvalidParameter("`model` must be a non-empty string.", param="model")

    tools = _tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        if not isinstance(parallel, bool):
            raise InvalidParameter(
                "`parallel_tool_calls` must be a boolean.", param="parallel_tool_calls"
            )
        if tools is None:
            raise InvalidParameter(
                "`parallel_tool_calls` needs `tools`.", param="parallel_tool_calls"
            )

    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidParameter("`stream` must be a boolean.", param="stream")

    user = body.get("user")
    return ChatRequest(
        model=model.strip() if isinstance(model, str) else None,
        messages=_messages(body.get("messages")),
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        stream=stream,
        include_usage=_include_usage(body.get("stream_options")),
        max_tokens=_output_cap(body),
        user=user if isinstance(user, str) else None,  # never refused, PRODUCT.md 12
        sampling=_sampling(body),
    )


def _messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise InvalidParameter("`messages` is required.", param="messages")
    if not isinstance(value, list):
        raise InvalidParameter("`messages` must be an array.", param="messages")
    if not value:
        raise InvalidParameter("`messages` must hold at least one message.", param="messages")
    if len(value) > MAX_MESSAGES:
        raise InvalidParameter(
            f"`messages` holds {len(value)} messages; at most {MAX_MESSAGES} are allowed.",
            param="messages",
        )
    return [_message(message, f"messages[{i}]") for i, message in enumerate(value)]


def _message(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidParameter(f"`{where}` must be an object.", param=where)
    role = value.get("role")
    if not isinstance(role, str):
        raise InvalidParameter(f"`{where}.role` must be a string.", param=f"{where}.role")
    role = ROLE_ALIASES.get(role, role)
    if role not in ROLES:
        raise InvalidRole(
            f"`{where}.role` is {value['role']!r}; use system, user, assistant or tool.",
            param=f"{where}.role",
        )

    message: dict[str, Any] = {"role": role}
    tool_calls = value.get("tool_calls")
    if tool_calls == []:  # no calls: as if absent, so `content` is required again
        tool_calls = None
    if tool_calls is not None:
        if role != "assistant":
            raise InvalidParameter(
                f"`{where}.tool_calls` is only allowed on assistant messages.",
                param=f"{where}.tool_calls",
            )
        message["tool_calls"] = _tool_calls(tool_calls, f"{where}.tool_calls")

    content = value.get("content")
    if content is None:
        if "tool_calls" not in message:
            raise InvalidParameter(
                f"`{where}.content` must be a string or an array of content parts; only an "
                "assistant message with `tool_calls` may leave it out.",
                param=f"{where}.content",
            )
        message["content"] = None
    else:
        message["content"] = _content(content, f"{where}.content")

    if role == "tool":
        call_id = value.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidParameter(
                f"`{where}.tool_call_id` must name the call this tool message answers.",
                param=f"{where}.tool_call_id",
            )
        message["tool_call_id"] = call_id
    return message


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise InvalidParameter(
            f"`{where}` must be a string or an array of content parts.", param=where
        )
    texts = []
    for i, part in enumerate(value):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidParameter(
                f"`{where}[{i}]` must be a content part object with a string `type`.",
                param=f"{where}[{i}]",
            )
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                raise InvalidParameter(
                    f"`{where}[{i}].text` must be a string.", param=f"{where}[{i}].text"
                )
            texts.append(part["text"])
        # Other parts (images, audio, …) are dropped for models without vision: spec,
        # messages[].content.
    return "\n".join(texts)


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or len(value) > MAX_TOOL_CALLS:
        raise InvalidParameter(
            f"`{where}` must be an array of at most {MAX_TOOL_CALLS} tool calls.", param=where
        )
    calls = []
    for i, call in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(call, dict):
            raise InvalidParameter(f"`{at}` must be an object.", param=at)
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise InvalidParameter(f"`{at}.id` must be a non-empty string.", param=f"{at}.id")
        if call.get("type", "function") != "function":
            raise InvalidParameter(f"`{at}.type` must be `function`.", param=f"{at}.type")
        function = call.get("function")
        if not isinstance(function, dict):
            raise InvalidParameter(f"`{at}.function` must be an object.", param=f"{at}.function")
        for key in ("name", "arguments"):
            if not isinstance(function.get(key), str):
                raise InvalidParameter(
                    f"`{at}.function.{key}` must be a string.", param=f"{at}.function.{key}"
                )
        calls.append(
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": function["arguments"]},
            }
        )
    return calls


def _tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidTools("`tools` must be an array.", param="tools")
    if len(value) > MAX_TOOLS:
        raise InvalidTools(f"`tools` holds at most {MAX_TOOLS} tools.", param="tools")
    tools: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(value):
        at = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise InvalidTools(
                f'`{at}` must be {{"type": "function", "function": {{…}}}}.', param=at
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise InvalidTools(f"`{at}.function` must be an object.", param=f"{at}.function")
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise InvalidTools(
                f"`{at}.function.name` must be 1 to 64 letters, digits, underscores or dashes.",
                param=f"{at}.function.name",
            )
        if name in seen:
            raise InvalidTools(
                f"`{at}.function.name` repeats {name!r}; tool names must differ.",
                param=f"{at}.function.name",
            )
        seen.add(name)
        checked: dict[str, Any] = {"name": name}
        for key, kind, label in (
            ("description", str, "a string"),
            ("parameters", dict, "a JSON Schema object"),
            ("strict", bool, "a boolean"),
        ):
            if function.get(key) is None:
                continue
            if not isinstance(function[key], kind):
                raise InvalidTools(
                    f"`{at}.function.{key}` must be {label}.", param=f"{at}.function.{key}"
                )
            checked[key] = function[key]
        tools.append({"type": "function", "function": checked})
    return tools


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> str | dict[str, Any] | None:
    if value is None:
        return None
    if tools is None:
        raise InvalidToolChoice("`tool_choice` needs `tools`.", param="tool_choice")
    if isinstance(value, str):
        if value not in TOOL_CHOICE_MODES:
            raise InvalidToolChoice(
                "`tool_choice` must be none, auto, required or name a function.",
                param="tool_choice",
            )
        return value
    name = None
    if isinstance(value, dict) and value.get("type") == "function":
        function = value.get("function")
        if isinstance(function, dict):
            name = function.get("name")
    if not isinstance(name, str):
        raise InvalidToolChoice(
            '`tool_choice` must be a string or {"type": "function", "function": {"name": …}}.',
            param="tool_choice",
        )
    if name not in {tool["function"]["name"] for tool in tools}:
        raise InvalidToolChoice(
            f"`tool_choice` names {name!r}, which is not in `tools`.", param="tool_choice"
        )
    return {"type": "function", "function": {"name": name}}


def _include_usage(value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, dict):
        raise InvalidParameter("`stream_options` must be an object.", param="stream_options")
    include = value.get("include_usage")
    if include is None:
        return False
    if not isinstance(include, bool):
        raise InvalidParameter(
            "`stream_options.include_usage` must be a boolean.",
            param="stream_options.include_usage",
        )
    return include


def _output_cap(body: dict[str, Any]) -> int | None:
    """The smaller of max_tokens and max_completion_tokens (PRODUCT.md decision 6)."""
    caps = []
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidParameter(f"`{name}` must be a positive whole number.", param=name)
        caps.append(value)
    return min(caps) if caps else None


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidParameter(f"`{name}` must be a number.", param=name)
    return value


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """Range-check the sampling fields that may reach a model server."""
    sampling: dict[str, Any] = {}
    for name, (low, high) in NUMBER_RANGES.items():
        value = _number(body, name)
        if value is None:
            continue
        if not low <= value <= high:
            raise InvalidParameter(f"`{name}` must be between {low:g} and {high:g}.", param=name)
        sampling[name] = value

    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise InvalidParameter("`n` must be 1: Mortar returns exactly one choice.", param="n")

    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if (
            not isinstance(stops, list)
            or len(stops) > MAX_STOP_SEQUENCES
            or not all(isinstance(s, str) and s for s in stops)
        ):
            raise InvalidParameter(
                f"`stop` must be a non-empty string or a list of at most {MAX_STOP_SEQUENCES}.",
                param="stop",
            )
        sampling["stop"] = stop

    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidParameter("`seed` must be an integer.", param="seed")
        sampling["seed"] = seed

    logprobs = body.get("logprobs")
    if logprobs is not None:
        if not isinstance(logprobs, bool):
            raise InvalidParameter("`logprobs` must be a boolean.", param="logprobs")
        sampling["logprobs"] = logprobs

    top_logprobs = body.get("top_logprobs")
    if top_logprobs is not None:
        if (
            isinstance(top_logprobs, bool)
            or not isinstance(top_logprobs, int)
            or not 0 <= top_logprobs <= 20
        ):
            raise InvalidParameter(
                "`top_logprobs` must be a whole number from 0 to 20.", param="top_logprobs"
            )
        sampling["top_logprobs"] = top_logprobs

    response_format = body.get("response_format")
    if response_format is not None:
        if not isinstance(response_format, dict) or not isinstance(
            response_format.get("type"), str
        ):
            raise InvalidParameter(
                "`response_format` must be an object with a string `type`.",
                param="response_format",
            )
        sampling["response_format"] = response_format
    return sampling
