"""An Anthropic Messages request, translated to the OpenAI chat-completions body model servers take.

The input is a request body already validated by the Messages route, as plain dicts; the output
is a chat-completions body for the rest of the pipeline. What has no counterpart is left out on
purpose, each case with its reason below: `top_k` (not one of the sampling fields Mortar
checks and forwards), `thinking` blocks of earlier turns, and fields such as `cache_control`.

A conversation that ends with an assistant turn (Anthropic's "prefill") becomes a chat request
that ends with an assistant message: a model server answers it with a new turn rather than
continuing that text (vLLM's `continue_final_message` would, but Mortar does not forward it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gateway.surfaces.messages.translate.tool_calls import dump_json

# Anthropic `tool_choice.type` → OpenAI `tool_choice` (a named tool is the object form).
_TOOL_CHOICE_MODES = {"auto": "auto", "any": "required", "none": "none"}


def messages_to_chat(request: Mapping[str, Any]) -> dict[str, Any]:
    """Translate a Messages request body into a chat-completions request body."""
    chat: dict[str, Any] = {}
    if request.get("model") is not None:
        chat["model"] = request["model"]
    messages: list[dict[str, Any]] = []
    system = request.get("system")
    if system is not None:
        messages.append({"role": "system", "content": _system_content(system)})
    for turn in request.get("messages") or ():
        messages.extend(_turn_messages(turn))
    chat["messages"] = messages
    if request.get("tools"):
        chat["tools"] = [_tool(tool) for tool in request["tools"]]
    choice = request.get("tool_choice")
    if choice is not None:
        chat["tool_choice"] = _tool_choice(choice)
        if choice.get("disable_parallel_tool_use") is True:
            chat["parallel_tool_calls"] = False
    if request.get("stop_sequences"):
        chat["stop"] = list(request["stop_sequences"])
    for field in ("max_tokens", "temperature", "top_p", "stream"):
        if request.get(field) is not None:
            chat[field] = request[field]
    # `top_k` is dropped: Mortar forwards only the sampling fields it range-checks
    # (`gateway.contract.validation.SAMPLING_FIELDS`).
    metadata = request.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    enable_thinking = _enable_thinking(request.get("thinking"))
    if enable_thinking is not None:
        chat["enable_thinking"] = enable_thinking
    return chat


def _system_content(system: str | list[Mapping[str, Any]]) -> str | list[dict[str, Any]]:
    # A string stays a string; text blocks become text parts, which the pipeline joins as it
    # joins any system message's parts. An empty block list says nothing: an empty string.
    if isinstance(system, str):
        return system
    parts = [_text_part(block) for block in system if block.get("type") == "text"]
    return parts or ""


def _turn_messages(turn: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    role = turn["role"]
    content = turn.get("content")
    if isinstance(content, str):
        yield {"role": role, "content": content}
    elif role == "assistant":
        yield _assistant_message(content or [])
    else:
        yield from _user_messages(content or [])


def _user_messages(blocks: list[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    # Each `tool_result` becomes a `tool` message. They come first, before what else the user
    # wrote in the turn: a chat template expects the answers right after the assistant message
    # that called the tools, and Anthropic asks clients to put them first in the turn anyway.
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            yield _tool_message(block)
        elif kind == "text":
            parts.append(_text_part(block))
        elif kind == "image":
            image = _image_part(block)
            if image is not None:
                parts.append(image)
    if parts:
        yield {"role": "user", "content": parts}


def _tool_message(block: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": block["tool_use_id"],
        "content": _tool_result_content(block.get("content")),
    }
    # The chat dialect has no error flag on a tool result. The text is left as the client wrote
    # it (agents put the error in it: that is what the model reads); the flag rides along as
    # `is_error` on the tool message, so the run keeps it and `chat_to_messages` restores it.
    # Mortar's chat schema ignores the field, so it never reaches a model server unknown to it.
    if block.get("is_error") is True:
        message["is_error"] = True
    return message


def _tool_result_content(content: Any) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [_text_part(block) for block in content if block.get("type") == "text"]
    return parts or ""


def _assistant_message(blocks: list[Mapping[str, Any]]) -> dict[str, Any]:
    # `thinking` / `redacted_thinking` blocks of earlier turns are dropped: the chat dialect has
    # no input field for them, sent as text the model would read its own reasoning as part of its
    # answer, and reasoning models' chat templates (Qwen3, DeepSeek-R1) strip earlier reasoning
    # from the prompt anyway. Their signatures mean nothing to a model server.
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(_text_part(block))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {
                        "name": block["name"],
                        "arguments": dump_json(block.get("input") or {}),
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant"}
    if calls:
        message["content"] = parts or None
        message["tool_calls"] = calls
    else:
        message["content"] = parts or ""
    return message


def _text_part(block: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "text", "text": block.get("text", "")}


def _image_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source['media_type']};base64,{source['data']}"
    elif source.get("type") == "url":
        url = source["url"]  # refused by the route's image rules before it gets here
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    if tool.get("input_schema") is not None:
        function["parameters"] = tool["input_schema"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Mapping[str, Any]) -> str | dict[str, Any]:
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return _TOOL_CHOICE_MODES.get(str(kind), "auto")


def _enable_thinking(thinking: Any) -> bool | None:
    # The model server's reasoning switch (vLLM: `chat_template_kwargs.enable_thinking`) is on or
    # off; `budget_tokens` has no counterpart there, the output cap still bounds the reply.
    if not isinstance(thinking, Mapping):
        return None
    kind = thinking.get("type")
    if kind in ("enabled", "adaptive"):
        return True
    if kind == "disabled":
        return False
    return None
