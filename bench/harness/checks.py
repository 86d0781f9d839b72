"""Before anything is measured: one request of each kind to each target, checked."""

from __future__ import annotations

import httpx

from .constants import CHUNKS
from .scenarios import request_body, request_headers
from .targets import Target


def check_target(target: Target) -> None:
    """One request of each kind, checked: 200, twenty tokens, and a complete stream."""
    headers = {**request_headers(target.auth), "Content-Type": "application/json"}
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
