"""What is measured: the scenarios, and the requests they send on each API surface.

Two surfaces: chat completions (OpenAI's `POST /v1/chat/completions`, which every target
serves) and Messages (Anthropic's `POST /v1/messages`, which only Mortar serves: it translates a
message to a chat request for the model server and the reply back, so the mock's directive in
the user's text reaches the mock either way). The Messages scenarios repeat json-32 and
stream-32 with the same model, prompt and reply, so their throughput compares with chat
completions' directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .constants import CHUNKS, QUESTION, SLOW_DELAY_MS, SYSTEM

CHAT, MESSAGES = "chat", "messages"
PATHS = {CHAT: "/v1/chat/completions", MESSAGES: "/v1/messages"}
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # "wrk" | "slow" | "latency"
    stream: bool
    title: str
    connections: int = 1
    delay_ms: int = 0
    chunks: int = 20
    surface: str = CHAT


# In the order each round measures them: a Messages scenario right after its chat completions
# twin, so the two are measured close together.
SCENARIOS = [
    Scenario("json-32", "wrk", False, "non-streaming, 32 connections", connections=32),
    Scenario(
        "messages-json-32",
        "wrk",
        False,
        "Messages, non-streaming, 32 connections",
        connections=32,
        surface=MESSAGES,
    ),
    Scenario("stream-32", "wrk", True, "20-chunk streams, 32 connections", connections=32),
    Scenario(
        "messages-stream-32",
        "wrk",
        True,
        "Messages, 20-chunk streams, 32 connections",
        connections=32,
        surface=MESSAGES,
    ),
    Scenario(
        "slow-1000",
        "slow",
        True,
        f"1,000 concurrent streams, a chunk every {SLOW_DELAY_MS} ms",
        connections=1000,
        delay_ms=SLOW_DELAY_MS,
    ),
    Scenario("json-1", "latency", False, "non-streaming, one connection"),
    Scenario("stream-1", "latency", True, "20-chunk stream, one connection"),
]
# Each Messages scenario and the chat completions scenario it is compared with.
MESSAGES_TWINS = {"messages-json-32": "json-32", "messages-stream-32": "stream-32"}


def request_body(
    model: str,
    *,
    stream: bool,
    delay_ms: int = 0,
    chunks: int = CHUNKS,
    surface: str = CHAT,
) -> bytes:
    """The request: the system prompt, the question with the mock's directive (`chunks` tokens
    of reply, `delay_ms` apart), in the surface's shape."""
    directive = f"[mock chunks={chunks}" + (f" delay_ms={delay_ms}" if delay_ms else "") + "]"
    question = f"{QUESTION} {directive}"
    max_tokens = max(200, chunks + 64)
    body: dict[str, Any]
    if surface == MESSAGES:
        body = {
            "model": model,
            "max_tokens": max_tokens,
            "system": SYSTEM,
            "messages": [{"role": "user", "content": question}],
            "stream": stream,
        }
        return json.dumps(body).encode()
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
        ],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def request_headers(auth: str, surface: str = CHAT) -> dict[str, str]:
    """The headers a request carries beside its content type: the target's key, if any, as the
    surface's clients send it."""
    if surface == MESSAGES:
        return {"x-api-key": auth, "anthropic-version": ANTHROPIC_VERSION}
    return {"Authorization": f"Bearer {auth}"} if auth else {}
