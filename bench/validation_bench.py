"""Time request validation per request: the declared schema against the hand-written validator.

Each body goes through what the pipeline's validate step does — decode the bytes with orjson,
then turn the object into a `ChatRequest` — once with today's schema validation
(`gateway.contract.validation`) and once with the hand-written validator it replaced, loaded
from git (`REVISION`) into a temporary module. The bodies: the README's example request, an agent
turn with 20 tools, and a 50-message conversation. Prints a markdown table of µs per request
(the best of several rounds, so other load on the machine counts as little as it can).

    .venv/bin/python bench/validation_bench.py [--rounds N] [--revision REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.contract import validation  # noqa: E402

# The last commit with the hand-written validator (gateway/validation.py, gateway/errors.py).
REVISION = "2c7f566"

Validate = Callable[[dict[str, Any]], Any]


def readme_request() -> dict[str, Any]:
    return {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "messages": [
            {"role": "system", "content": "You are a concise assistant for an inference platform."},
            {"role": "user", "content": "What does max_tokens limit?"},
        ],
        "max_tokens": 200,
        "stream": False,
    }


def _tool(index: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"tool_{index}",
            "description": f"Look up record kind {index} by id and return it as JSON.",
            "parameters": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The record's id."},
                    "fields": {"type": "array", "items": {"type": "string"}},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                },
                "required": ["id"],
            },
        },
    }


def agent_request() -> dict[str, Any]:
    """An agent turn: 20 tools, and a conversation with two rounds of calls and results."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an operations agent. Use the tools."},
        {"role": "user", "content": "Which replicas served the slow requests last hour?"},
    ]
    for turn in range(2):
        calls = [
            {
                "id": f"call_{turn}_{n}",
                "type": "function",
                "function": {"name": f"tool_{n}", "arguments": f'{{"id": "r{turn}{n}"}}'},
            }
            for n in range(2)
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [
            {"role": "tool", "tool_call_id": call["id"], "content": '{"replica": "a", "ms": 812}'}
            for call in calls
        ]
    return {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "messages": messages,
        "tools": [_tool(n) for n in range(20)],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
    }


def conversation_request() -> dict[str, Any]:
    """A 50-message chat: a system prompt, then user and assistant turns (some as parts)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief and accurate."}]
    for n in range(49):
        if n % 2:
            messages.append({"role": "assistant", "content": f"Answer {n}: " + "words " * 30})
        elif n % 10 == 0:
            content = [
                {"type": "text", "text": f"Question {n}, with a picture:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ]
            messages.append({"role": "user", "content": content})
        else:
            messages.append({"role": "user", "content": f"Question {n}: " + "words " * 20})
    return {"messages": messages, "max_tokens": 256, "user": "alice", "stream": False}


BODIES = {
    "README example": readme_request,
    "agent, 20 tools": agent_request,
    "50 messages": conversation_request,
}


def old_validator(revision: str) -> Validate:
    """The hand-written validator as of `revision`, imported from a temporary directory."""
    package = "oldcontract"
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / package
        root.mkdir()
        (root / "__init__.py").write_text("")
        for name in ("errors", "validation"):
            source = subprocess.run(
                ["git", "show", f"{revision}:gateway/{name}.py"],
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            source = source.replace("from gateway.errors", f"from {package}.errors")
            (root / f"{name}.py").write_text(source)
        sys.path.insert(0, folder)
        try:
            module = _import(f"{package}.validation", root / "validation.py")
        finally:
            sys.path.remove(folder)
    return module.validate_chat_request


def _import(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def per_request_us(validators: list[Validate], body: bytes, rounds: int) -> list[float]:
    """For each validator, the best round's CPU µs to decode and validate `body` once.

    Rounds alternate between the validators, so load from other processes falls on each alike;
    CPU time (not wall time) leaves out the time this process waits for a core.
    """
    timers = [
        timeit.Timer(
            lambda validate=validate: validate(orjson.loads(body)), timer=time.process_time
        )
        for validate in validators
    ]
    numbers = [timer.autorange()[0] for timer in timers]
    best = [float("inf")] * len(timers)
    for _ in range(rounds):
        for index, (timer, number) in enumerate(zip(timers, numbers, strict=True)):
            best[index] = min(best[index], timer.timeit(number) / number * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--revision", default=REVISION)
    args = parser.parse_args()

    old = old_validator(args.revision)
    new = validation.validate_chat_request
    print(f"Validation per request (decode + validate, CPU µs), best of {args.rounds} rounds\n")
    print("| body | bytes | hand-written (µs) | schema (µs) | schema / hand-written |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, build in BODIES.items():
        body = orjson.dumps(build())
        # Both must accept the body and agree on what it asks for.
        assert vars(old(orjson.loads(body))) == vars(new(orjson.loads(body))), label
        old_us, new_us = per_request_us([old, new], body, args.rounds)
        print(f"| {label} | {len(body):,} | {old_us:.1f} | {new_us:.1f} | {new_us / old_us:.2f} |")


if __name__ == "__main__":
    main()
