"""One reply, rendered as vLLM renders it: as JSON, or as the SSE events of a stream."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

# `fault=runon` ignores the request's output cap; this bounds the reply all the same.
RUNON_SAFETY_LIMIT = 100_000


class Completion:
    """One reply, rendered as vLLM renders it."""

    def __init__(self, body: dict[str, Any], settings: dict[str, Any]):
        self.body = body
        self.settings = dict(settings)
        template = body.get("chat_template_kwargs") or {}
        if template.get("enable_thinking") is False:
            self.settings["reasoning"] = 0  # the chat template turns the model's thinking off
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = body.get("model", "mock-model")
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 1 << 30
        self.runon = settings["fault"] == "runon"
        count = RUNON_SAFETY_LIMIT if self.runon else min(int(settings["chunks"]), max_tokens)
        self.tool = self._tool_to_call()
        self.pieces = [] if self.tool else [f" tok{i}" if i else "tok0" for i in range(count)]
        self.finish_reason = (
            "tool_calls"
            if self.tool
            else "length"
            if (not self.runon and int(settings["chunks"]) > max_tokens)
            else "stop"
        )
        self.stop_reason = self._stop_at_a_stop_string()
        prompt_text = json.dumps(body.get("messages", []))
        self.prompt_tokens = max(1, len(prompt_text) // 4)

    def _stop_at_a_stop_string(self) -> str | None:
        """As vLLM does: cut the reply before the first of the request's `stop` strings it
        would hold, finish with `stop`, and name the string in `stop_reason`."""
        stop = self.body.get("stop")
        strings = [stop] if isinstance(stop, str) else list(stop or [])
        text = "".join(self.pieces)
        hits = [(text.find(string), string) for string in strings if string and string in text]
        if not hits or self.runon:
            return None
        at, string = min(hits)
        kept: list[str] = []
        for piece in self.pieces:
            room = at - len("".join(kept))
            if room <= 0:
                break
            kept.append(piece[:room])
        self.pieces = kept
        self.finish_reason = "stop"
        return string

    def _tool_to_call(self) -> dict[str, Any] | None:
        tools = self.body.get("tools") or []
        choice = self.body.get("tool_choice", "auto")
        messages = self.body.get("messages") or [{}]
        if not tools or choice == "none" or messages[-1].get("role") == "tool":
            return None
        if isinstance(choice, dict):
            name = choice["function"]["name"]
            chosen: dict[str, Any] = next(t for t in tools if t["function"]["name"] == name)
            return chosen
        first: dict[str, Any] = tools[0]
        return first

    def usage(self) -> dict[str, Any]:
        completion = len(self.pieces) + self.settings["reasoning"] + (9 if self.tool else 0)
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion,
            "completion_tokens": completion,
        }
        if self.settings["cached"]:
            usage["prompt_tokens_details"] = {"cached_tokens": int(self.settings["cached"])}
        return usage

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        data = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        if finish_reason is not None and self.stop_reason is not None:
            choice["stop_reason"] = self.stop_reason
        return self._chunk([choice])

    def events(self) -> Iterator[bytes]:
        yield self._delta({"role": "assistant", "content": ""})
        for i in range(int(self.settings["reasoning"])):
            yield self._delta({"reasoning_content": f"think{i} "})
        if self.tool:
            name = self.tool["function"]["name"]
            call_id = f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"
            yield self._delta(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
            for piece in ('{"city": ', '"Paris"}'):
                yield self._delta({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            yield self._delta({"content": ""}, "tool_calls")
        else:
            last = len(self.pieces) - 1
            for i, piece in enumerate(self.pieces):
                yield self._delta(
                    {"content": piece}, self.finish_reason if i == last and not self.runon else None
                )
        options = self.body.get("stream_options") or {}
        if options.get("include_usage") and self.settings["usage"]:
            yield self._chunk([], usage=self.usage())
        yield b"data: [DONE]\n\n"

    def as_json(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.pieces) or None}
        if self.settings["reasoning"]:
            message["reasoning_content"] = "".join(
                f"think{i} " for i in range(int(self.settings["reasoning"]))
            )
        if self.tool:
            message["tool_calls"] = [
                {
                    "id": f"chatcmpl-tool-{uuid.uuid4().hex[:16]}",
                    "type": "function",
                    "function": {
                        "name": self.tool["function"]["name"],
                        "arguments": '{"city": "Paris"}',
                    },
                }
            ]
        result: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                    "stop_reason": self.stop_reason,
                }
            ],
        }
        if self.settings["usage"]:
            result["usage"] = self.usage()
        return result
