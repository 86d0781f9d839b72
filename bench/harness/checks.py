"""Before anything is measured: one request of each kind to each target, on each surface it
serves, checked."""

from __future__ import annotations

import json
from typing import Any

import httpx

from .constants import CHUNKS, ROOT
from .scenarios import CHAT, MESSAGES, PATHS, request_body, request_headers
from .targets import Target

TOKENS = ("tok", " tok")  # the mock's reply: "tok0 tok1 …", one token a chunk


def check_target(target: Target) -> None:
    """One request of each kind on each surface the target serves, checked: 200, twenty
    tokens, and a complete stream. A Mortar from another revision that has no Messages route is
    left out of the Messages scenarios; the working tree's must serve it."""
    with httpx.Client(timeout=30) as client:
        check_chat(client, target)
        if MESSAGES in target.surfaces and not check_messages(client, target):
            print(f"{target.name} has no Messages route: not measured on it", flush=True)
            target.surfaces.discard(MESSAGES)


def check_chat(client: httpx.Client, target: Target) -> None:
    """A chat completion as JSON and as a stream ending in `[DONE]`."""
    headers = _headers(target, CHAT)
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
    tokens = sum(1 for e in events if any(f'"content":"{t}' in e for t in TOKENS))
    if tokens != CHUNKS or events[-1] != "data: [DONE]":
        raise RuntimeError(f"{target.name}: stream with {tokens} tokens:\n{text[:2000]}")


def check_messages(client: httpx.Client, target: Target) -> bool:
    """A message as JSON, and as Anthropic's event stream: a text delta per token, then
    `message_stop` last. False if the target is a Mortar from another revision without the
    route."""
    url, headers = target.base + PATHS[MESSAGES], _headers(target, MESSAGES)
    body = request_body(target.model, stream=False, surface=MESSAGES)
    reply = client.post(url, content=body, headers=headers)
    source = target.mortar.of.source if target.mortar is not None else ROOT
    if reply.status_code == 404 and source != ROOT:
        return False
    if reply.status_code != 200:
        raise RuntimeError(f"{target.name}: Messages {reply.status_code} {reply.text[:300]}")
    message = reply.json()
    text = "".join(block.get("text", "") for block in message.get("content", []))
    if message.get("type") != "message" or text.count("tok") != CHUNKS:
        raise RuntimeError(f"{target.name}: unexpected message {message!r}")
    if "X-Mortar-Run-Id" not in reply.headers:
        raise RuntimeError(f"{target.name}: Messages reply without X-Mortar-Run-Id")
    body = request_body(target.model, stream=True, surface=MESSAGES)
    with client.stream("POST", url, content=body, headers=headers) as stream:
        raw = stream.read().decode()
    if stream.status_code != 200:
        raise RuntimeError(f"{target.name}: Messages stream {stream.status_code} {raw[:300]}")
    events = [_event(block) for block in raw.split("\n\n") if block.strip()]
    tokens = sum(
        1
        for name, data in events
        if name == "content_block_delta" and data["delta"].get("text", "").startswith(TOKENS)
    )
    if tokens != CHUNKS or not events or events[-1][0] != "message_stop":
        raise RuntimeError(f"{target.name}: Messages stream with {tokens} tokens:\n{raw[:2000]}")
    return True


def _headers(target: Target, surface: str = MESSAGES) -> dict[str, str]:
    return {**request_headers(target.auth, surface), "Content-Type": "application/json"}


def _event(block: str) -> tuple[str, dict[str, Any]]:
    """An event of Anthropic's stream: its name and its data."""
    fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
    data = json.loads(fields.get("data", "{}"))
    return fields.get("event", ""), data if isinstance(data, dict) else {}
