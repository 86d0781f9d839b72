"""What is measured: the scenarios, and the requests they send."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .constants import CHUNKS, QUESTION, SLOW_DELAY_MS, SYSTEM


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # "wrk" | "slow" | "latency"
    stream: bool
    title: str
    connections: int = 1
    delay_ms: int = 0
    chunks: int = 20


SCENARIOS = [
    Scenario("json-32", "wrk", False, "non-streaming, 32 connections", connections=32),
    Scenario("stream-32", "wrk", True, "20-chunk streams, 32 connections", connections=32),
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


def request_body(model: str, *, stream: bool, delay_ms: int = 0, chunks: int = CHUNKS) -> bytes:
    directive = f"[mock chunks={chunks}" + (f" delay_ms={delay_ms}" if delay_ms else "") + "]"
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"{QUESTION} {directive}"},
        ],
        "max_tokens": max(200, chunks + 64),
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def request_headers(auth: str) -> dict[str, str]:
    """The headers a request carries beside its content type: the target's key, if any."""
    return {"Authorization": f"Bearer {auth}"} if auth else {}
