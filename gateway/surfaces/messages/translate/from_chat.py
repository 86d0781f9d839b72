"""An OpenAI chat-completions request, translated to an Anthropic Messages request.

The inverse of `to_chat.py`, over the part of the chat dialect that has a Messages counterpart:
what the property tests translate there and back, and what the docs can show side by side. The
Messages route itself never needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.surfaces.messages.translate.tool_calls import call_arguments, tool_input

# OpenAI `tool_choice` modes → Anthropic `tool_choice.type`.
_TOOL_CHOICE_TYPES = {"auto": "auto", "required": "any", "none": "none"}
# Anthropic requires `input_schema`; a chat function may leave `parameters` out (no arguments).
_NO_PARAMETERS = {"type": "object", "properties": {}}
# Anthropic requires a thinking budget the chat dialect does not carry: its minimum.
THINKING_BUDGET_TOKENS = 1024


def chat_to_messages(request: Mapping[str, Any]) -> dict[str, Any]:
    """Translate a chat-completions request body into a Messages request body."""
    result: dict[str, Any] = {}
    if request.get("model") is not None:
        result["model"] = request["model"]
    system: list[dict[str, Any]] = []
    system_strings: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in request.get("messages") or ():
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            # Messages has one system prompt, outside the turns: every system message joins it.
            system.extend(_text_blocks(content))
            if isinstance(content, str):
                system_strings.append(content)
        elif role == "tool":
            _append(turns, "user", [_tool_result(message)])
        elif role == "assistant":
            plain = isinstance(content, str) and not message.get("tool_calls")
            _append(turns, "assistant", content if plain else _assistant_blocks(message))
        else:
            _append(turns, "user", content if isinstance(content, str) else _user_blocks(content))
    if len(system_strings) == 1 and len(system) == 1:
        result["system"] = system_strings[0]
    elif system:
        result["system"] = system
    result["messages"] = turns
    max_tokens = _output_cap(request)
    if max_tokens is not None:
        result["max_tokens"] = max_tokens
    if request.get("tools"):
        result["tools"] = [_tool(tool["function"]) for tool in request["tools"]]
    choice = _tool_choice(request.get("tool_choice"), request.get("parallel_tool_calls"))
    if choice is not None:
        result["tool_choice"] = choice
    stop = request.get("stop")
    if stop:
        result["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    for field in ("temperature", "top_p", "stream"):
        if request.get(field) is not None:
            result[field] = request[field]
    if isinstance(request.get("user"), str):
        result["metadata"] = {"user_id": request["user"]}
    thinking = _thinking(request)
    if thinking is not None:
        result["thinking"] = thinking
    return result


def _append(turns: list[dict[str, Any]], role: str, content: str | list[dict[str, Any]]) -> None:
    # Consecutive messages of one role make one turn, as Anthropic reads them: `tool` messages
    # and the user text after them become one user turn, its `tool_result`s first.
    if not turns or turns[-1]["role"] != role:
        turns.append({"role": role, "content": content})
        return
    previous = turns[-1]
    previous["content"] = _as_blocks(previous["content"]) + _as_blocks(content)


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [
        {"type": "text", "text": part.get("text", "")}
        for part in content or ()
        if part.get("type") == "text"
    ]


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks: list[dict[str, Any]] = []
    for part in content or ():
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            blocks.append({"type": "image", "source": _image_source(part["image_url"]["url"])})
    return blocks


def _image_source(url: str) -> dict[str, Any]:
    header, comma, data = url.partition(",")
    if url.startswith("data:") and comma and header.endswith(";base64"):
        media_type = header[len("data:") : -len(";base64")]
        return {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "url", "url": url}


def _assistant_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks = [block for block in _text_blocks(message.get("content")) if block["text"]]
    for call in message.get("tool_calls") or ():
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": tool_input(call_arguments(call)),
            }
        )
    return blocks


def _tool_result(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": message["tool_call_id"],
        "content": content if isinstance(content, str) else _text_blocks(content),
    }
    if message.get("is_error") is True:
        block["is_error"] = True
    return block


def _output_cap(request: Mapping[str, Any]) -> int | None:
    # The smaller of the two caps wins: a reply never runs past either limit the client set.
    caps = [request.get(f) for f in ("max_tokens", "max_completion_tokens")]
    present = [cap for cap in caps if isinstance(cap, int)]
    return min(present) if present else None


def _tool(function: Mapping[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": function["name"]}
    if function.get("description") is not None:
        tool["description"] = function["description"]
    parameters = function.get("parameters")
    tool["input_schema"] = parameters if parameters is not None else dict(_NO_PARAMETERS)
    return tool


def _tool_choice(choice: Any, parallel_tool_calls: Any) -> dict[str, Any] | None:
    result: dict[str, Any] | None
    if isinstance(choice, Mapping):
        result = {"type": "tool", "name": choice["function"]["name"]}
    elif isinstance(choice, str):
        result = {"type": _TOOL_CHOICE_TYPES.get(choice, "auto")}
    else:
        result = None
    if parallel_tool_calls is False:
        if result is None:
            result = {"type": "auto"}
        # `none` calls nothing, so there is nothing to keep from running in parallel.
        if result["type"] != "none":
            result["disable_parallel_tool_use"] = True
    return result


def _thinking(request: Mapping[str, Any]) -> dict[str, Any] | None:
    enabled = request.get("enable_thinking")
    kwargs = request.get("chat_template_kwargs")
    if enabled is None and isinstance(kwargs, Mapping):
        enabled = kwargs.get("enable_thinking")
    if enabled is True:
        return {"type": "enabled", "budget_tokens": THINKING_BUDGET_TOKENS}
    if enabled is False:
        return {"type": "disabled"}
    return None
