"""Time request validation per request, on each API surface: what the pipeline's validate step
costs a chat completions body and the same request as a Messages body.

Each body goes through its surface's `validate` (`gateway.contract.surface`: the bytes decoded
with orjson and validated into the `ChatRequest` the pipeline works with; a Messages body is
also translated into that chat request). The bodies: the README's example request, an agent
turn with 20 tools and two rounds of tool calls, and a 50-message conversation, each in both
shapes. Prints a markdown table of CPU µs per request (the best of several rounds, so other
load on the machine counts as little as it can).

    .venv/bin/python -m bench micro validation [--rounds N]

Writes bench/results/validation.md.
"""

from __future__ import annotations

import argparse
import os
import time
import timeit
from collections.abc import Callable
from typing import Any

import orjson

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")

import django

django.setup()

from bench.commands import program  # noqa: E402
from bench.harness.results import recorded  # noqa: E402
from gateway.contract.surface import Surface  # noqa: E402
from gateway.surfaces.chat import SURFACE as CHAT_COMPLETIONS  # noqa: E402
from gateway.surfaces.messages import SURFACE as MESSAGES  # noqa: E402

MODEL = "Qwen/Qwen2.5-7B-Instruct"
SYSTEM = "You are a concise assistant for an inference platform."


def readme_request() -> tuple[dict[str, Any], dict[str, Any]]:
    chat = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What does max_tokens limit?"},
        ],
        "max_tokens": 200,
        "stream": False,
    }
    message = {
        "model": MODEL,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": "What does max_tokens limit?"}],
        "max_tokens": 200,
        "stream": False,
    }
    return chat, message


def _schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The record's id."},
            "fields": {"type": "array", "items": {"type": "string"}},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        },
        "required": ["id"],
    }


def agent_request() -> tuple[dict[str, Any], dict[str, Any]]:
    """An agent turn: 20 tools, and a conversation with two rounds of calls and results."""
    description = "Look up record kind {} by id and return it as JSON."
    chat_messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an operations agent. Use the tools."},
        {"role": "user", "content": "Which replicas served the slow requests last hour?"},
    ]
    anthropic_messages: list[dict[str, Any]] = [chat_messages[1]]
    for turn in range(2):
        calls = [(f"call_{turn}_{n}", f"tool_{n}", {"id": f"r{turn}{n}"}) for n in range(2)]
        chat_messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": id_,
                        "type": "function",
                        "function": {"name": name, "arguments": orjson.dumps(args).decode()},
                    }
                    for id_, name, args in calls
                ],
            }
        )
        chat_messages += [
            {"role": "tool", "tool_call_id": id_, "content": '{"replica": "a", "ms": 812}'}
            for id_, _, _ in calls
        ]
        anthropic_messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": id_, "name": name, "input": args}
                    for id_, name, args in calls
                ],
            }
        )
        anthropic_messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": id_, "content": '{"replica": "a"}'}
                    for id_, _, _ in calls
                ],
            }
        )
    chat = {
        "model": MODEL,
        "messages": chat_messages,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": f"tool_{n}",
                    "description": description.format(n),
                    "parameters": _schema(),
                },
            }
            for n in range(20)
        ],
        "tool_choice": "auto",
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
    }
    message = {
        "model": MODEL,
        "max_tokens": 1024,
        "system": chat_messages[0]["content"],
        "messages": anthropic_messages,
        "tools": [
            {"name": f"tool_{n}", "description": description.format(n), "input_schema": _schema()}
            for n in range(20)
        ],
        "tool_choice": {"type": "auto"},
        "stream": True,
        "temperature": 0.2,
    }
    return chat, message


def conversation_request() -> tuple[dict[str, Any], dict[str, Any]]:
    """A 50-message chat: a system prompt, then user and assistant turns."""
    turns = [
        {"role": "assistant", "content": f"Answer {n}: " + "words " * 30}
        if n % 2
        else {"role": "user", "content": f"Question {n}: " + "words " * 20}
        for n in range(49)
    ]
    chat = {
        "model": MODEL,
        "messages": [{"role": "system", "content": "Be brief and accurate."}, *turns],
        "max_tokens": 256,
        "user": "alice",
        "stream": False,
    }
    message = {
        "model": MODEL,
        "system": "Be brief and accurate.",
        "messages": turns,
        "max_tokens": 256,
        "metadata": {"user_id": "alice"},
        "stream": False,
    }
    return chat, message


BODIES = {
    "README example": readme_request,
    "agent, 20 tools": agent_request,
    "50 messages": conversation_request,
}


def validating(surface: Surface, body: bytes) -> Callable[[], object]:
    """A call that validates `body` once, as the surface's validate step does."""
    return lambda: surface.validate(body)


def per_request_us(validators: list[Callable[[], object]], rounds: int) -> list[float]:
    """For each validator, the best round's CPU µs to validate its body once.

    Rounds alternate between the validators, so load from other processes falls on each alike;
    CPU time (not wall time) leaves out the time this process waits for a core.
    """
    timers = [timeit.Timer(validate, timer=time.process_time) for validate in validators]
    numbers = [timer.autorange()[0] for timer in timers]
    best = [float("inf")] * len(timers)
    for _ in range(rounds):
        for index, (timer, number) in enumerate(zip(timers, numbers, strict=True)):
            best[index] = min(best[index], timer.timeit(number) / number * 1e6)
    return best


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    with recorded("validation", "Request validation per request, on each surface"):
        print(f"Decode + validate, CPU µs per request, best of {args.rounds} rounds\n")
        print(
            "| body | chat bytes | chat (µs) | Messages bytes | Messages (µs) | Messages / chat |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for label, build in BODIES.items():
            chat, message = (orjson.dumps(body) for body in build())
            # Both must accept their body and ask for the same messages and tools.
            as_chat = CHAT_COMPLETIONS.validate(chat)
            as_message = MESSAGES.validate(message)
            assert len(as_chat.messages) == len(as_message.messages), label
            chat_us, message_us = per_request_us(
                [validating(CHAT_COMPLETIONS, chat), validating(MESSAGES, message)],
                args.rounds,
            )
            print(
                f"| {label} | {len(chat):,} | {chat_us:.1f} | {len(message):,} | "
                f"{message_us:.1f} | {message_us / chat_us:.2f} |"
            )
