"""What is measured: the scenarios, the request bodies they send, and a check of each target."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .constants import CHUNKS, QUESTION, SLOW_DELAY_MS, SYSTEM
from .targets import Target


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


def body_file(tmp: Path, target: Target, scenario: Scenario) -> Path:
    """The scenario's request body for this target, written once to a file for the loaders."""
    path = tmp / f"body-{target.name}-{scenario.name}.json"
    if not path.exists():
        path.write_bytes(
            request_body(
                target.model,
                stream=scenario.stream,
                delay_ms=scenario.delay_ms,
                chunks=scenario.chunks,
            )
        )
    return path


def check_target(target: Target) -> None:
    """One request of each kind, checked: 200, twenty tokens, and a complete stream."""
    headers = {"Authorization": f"Bearer {target.auth}"} if target.auth else {}
    headers["Content-Type"] = "application/json"
    with httpx.Client(timeout=30) as client:
        reply = client.post(
            target.url, content=request_body(target.model, stream=False), headers=headers
        )
        if reply.status_code != 200:
            raise RuntimeError(f"{target.name}: {reply.status_code} {reply.text[:300]}")
        content = reply.json()["choices"][0]["message"]["content"]
        if content.count("tok") != CHUNKS:
            raise RuntimeError(f"{target.name}: unexpected reply {content!r}")
        if target.kind == "mortar" and "X-Mortar-Run-Id" not in reply.headers:
            raise RuntimeError(f"{target.name}: no X-Mortar-Run-Id")
        body = request_body(target.model, stream=True)
        with client.stream("POST", target.url, content=body, headers=headers) as stream:
            text = stream.read().decode()
        if stream.status_code != 200:
            raise RuntimeError(f"{target.name}: stream {stream.status_code} {text[:300]}")
        events = [e for e in text.split("\n\n") if e.startswith("data: ")]
        tokens = sum(1 for e in events if '"content":"tok' in e or '"content":" tok' in e)
        if tokens != CHUNKS or events[-1] != "data: [DONE]":
            raise RuntimeError(f"{target.name}: stream with {tokens} tokens:\n{text[:2000]}")
