"""The built-in scripted model: deterministic replies derived from the conversation.

It lets an application — or an agent loop — run against Mortar with no model server. Its tool
behaviour is fixed, so a client's tests can rely on it: it calls the function `tool_choice`
names, or every tool for `required`, or only the first when `parallel_tool_calls` is false.
Otherwise it calls the first tool, until the conversation ends with tool results, which it
answers in text. Each required argument is filled with an empty value of its type.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.contract.chat import ChatRequest, content_text
from gateway.generation.reply import Delta, Deltas, Generation
from gateway.tokens import TokenCounter

WORDS_PER_PIECE = 3
ARGUMENT_PIECE_CHARS = 24

# Replies to prompts the documentation uses, so its examples answer as shown.
SCRIPT = {
    "what does max_tokens limit?": (
        "It caps how many tokens the model may generate for this reply."
    ),
}

EMPTY_VALUES: dict[str, Any] = {
    "string": "",
    "number": 0,
    "integer": 0,
    "boolean": False,
    "array": [],
    "object": {},
    "null": None,
}

_PIECE = re.compile(rf"\s*\S+(?:\s+\S+){{0,{WORDS_PER_PIECE - 1}}}")


def reply_text(messages: list[dict[str, Any]]) -> str:
    """Derive the reply from the conversation, deterministically."""
    last = messages[-1]
    if last["role"] == "tool":
        return _answer_tool_results(messages)
    user_texts = [content_text(m["content"]) for m in messages if m["role"] == "user"]
    if not user_texts:
        return "Hello! This is Mortar's scripted model; send a user message to get a reply."
    question = user_texts[-1].strip()
    if not question:
        return "Your message was empty."
    scripted = SCRIPT.get(" ".join(question.lower().split()))
    if scripted:
        return scripted
    return f"You said: {question}"


def _answer_tool_results(messages: list[dict[str, Any]]) -> str:
    names = {
        call["id"]: call["function"]["name"]
        for message in messages
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or ()
    }
    results = []
    for message in reversed(messages):
        if message["role"] != "tool":
            break
        name = names.get(message["tool_call_id"], message["tool_call_id"])
        results.append(f"{name} returned {message['content'] or 'nothing'}")
    return "The tools answered: " + "; ".join(reversed(results)) + "."


def tools_to_call(chat: ChatRequest) -> list[dict[str, Any]]:
    """The tool definitions the scripted model calls for this request (maybe none)."""
    tools = chat.tools or []
    choice = chat.tool_choice
    if not tools or choice == "none":
        return []
    if chat.named_tool:
        return [t for t in tools if t["function"]["name"] == chat.named_tool]
    if choice == "required":
        return tools[:1] if chat.parallel_tool_calls is False else tools
    if chat.messages[-1]["role"] == "tool":
        return []
    return tools[:1]


def empty_arguments(parameters: dict[str, Any] | None) -> dict[str, Any]:
    """Each required argument with an empty value of its type."""
    if not isinstance(parameters, dict):
        return {}
    properties = parameters.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = parameters.get("required")
    arguments: dict[str, Any] = {}
    for name in required if isinstance(required, list) else ():
        if not isinstance(name, str):
            continue
        schema = properties.get(name)
        kind = schema.get("type") if isinstance(schema, dict) else None
        if isinstance(kind, list):  # e.g. ["string", "null"]: the first that is not null
            kind = next((k for k in kind if k != "null"), "null")
        arguments[name] = EMPTY_VALUES.get(kind, "") if isinstance(kind, str) else ""
    return arguments


def text_pieces(text: str) -> list[str]:
    """Split into pieces of a few words; joined, they give back the text exactly."""
    pieces = _PIECE.findall(text)
    if not pieces:
        return [text] if text else []
    pieces[-1] += text[len("".join(pieces)) :]  # trailing whitespace
    return pieces


async def one_per_batch(
    deltas: AsyncGenerator[Delta, None],
) -> Deltas:
    """The scripted model's deltas as the relay takes them: batches, here of one each (it paces
    them itself). Closing this closes the model, so its `generation` is complete."""
    try:
        async for delta in deltas:
            yield [delta]
    finally:
        await deltas.aclose()


@dataclass(frozen=True)
class Script:
    """A whole reply, decided up front, to be sent piece by piece."""

    deltas: list[dict[str, Any]]
    completion_tokens: int
    finish_reason: str


class ScriptedModel:
    """Generates a reply as a stream of `delta` objects, pausing `delay` seconds between them.

    `generation` holds what was actually sent: a reply stopped half-way has half its text, and
    the tokens of the pieces sent so far.
    """

    def __init__(self, *, counter: TokenCounter, delay_ms: int = 0):
        self.counter = counter
        self.delay = delay_ms / 1000

    async def generate(
        self, chat: ChatRequest, *, max_tokens: int, generation: Generation
    ) -> AsyncGenerator[Delta, None]:
        tools = tools_to_call(chat)
        script = self._tool_calls(tools) if tools else self._text(chat, max_tokens)
        finished = False
        try:
            for i, delta in enumerate(script.deltas):
                if i and self.delay:
                    await asyncio.sleep(self.delay)
                generation.add_delta(delta)
                yield delta
            finished = True
        finally:
            if finished:
                generation.finish_reason = script.finish_reason
                generation.completion_tokens = script.completion_tokens
            else:
                generation.completion_tokens = self.counter.count(generation.content or "")

    def _text(self, chat: ChatRequest, max_tokens: int) -> Script:
        text, tokens, cut = self.counter.truncate(reply_text(chat.messages), max_tokens)
        return Script(
            deltas=[{"content": piece} for piece in text_pieces(text)],
            completion_tokens=tokens,
            finish_reason="length" if cut else "stop",
        )

    def _tool_calls(self, tools: list[dict[str, Any]]) -> Script:
        deltas: list[dict[str, Any]] = []
        tokens = 0
        for index, tool in enumerate(tools):
            function = tool["function"]
            call_id = f"call_{secrets.token_hex(12)}"
            arguments = orjson.dumps(empty_arguments(function.get("parameters"))).decode()
            tokens += self.counter.tool_call_tokens(function["name"], arguments)
            # The first piece of a call carries its index, id, type and name (as OpenAI streams a
            # tool call); the pieces after it only the index and the next part of the arguments.
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
            for start in range(0, len(arguments), ARGUMENT_PIECE_CHARS):
                piece = arguments[start : start + ARGUMENT_PIECE_CHARS]
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        return Script(deltas=deltas, completion_tokens=tokens, finish_reason="tool_calls")
