"""A mock model server that speaks vLLM's dialect of the OpenAI chat API, and misbehaves on cue.

Tests and benchmarks start it as a real process (`python -m mockmodel --port N`). It answers
`POST /v1/chat/completions` as JSON or SSE like vLLM does (a first chunk with the role and empty
content, one chunk per token, the finish reason on the last content chunk, a usage chunk with
empty `choices` when `stream_options.include_usage`, `[DONE]`), with usage carrying
`prompt_tokens_details.cached_tokens`, streamed tool-call pieces and reasoning. A reply that would
hold one of the request's `stop` strings is cut before it, with the string in `stop_reason`.

Behaviour is set per request by a directive in the conversation's text (a message's content, or
the text parts of content parts, as beside an image), e.g.
`[mock fault=drop chunks=10 delay_ms=50]`, or for every request by `POST /_mock/config`:

    fault       none | hang | error500 | error400 | status | drop | runon | garbage |
                garbage_late | reset
    status      the HTTP status `fault=status` answers with (an OpenAI-style error body)
    retry_after the `Retry-After` seconds `fault=status` sends with it (0: no header)
    chunks      content tokens to send (capped by max_tokens, except for fault=runon)
    delay_ms    pause between chunks;   first_delay_ms   pause before the response starts
    reasoning   reasoning tokens before the content (sent as `reasoning_content`); none when
                the request turns thinking off (`chat_template_kwargs.enable_thinking: false`,
                as Qwen3's chat template does on vLLM)
    cached      `prompt_tokens_details.cached_tokens` to report;   usage=0 reports none

It counts tokens as the model servers Mortar can ask do, with a tokenizer of its own (a word or
a punctuation mark is a token) and a chat template that adds a system prompt when the
conversation has none: vLLM's `POST /tokenize` (`messages`, or a `prompt`), llama.cpp's
`POST /apply-template` and `POST /tokenize` (`content`; `add_special` adds a BOS token), and
llama-cpp-python's `POST /extras/tokenize/count` (`input`, always with a BOS token). The config's
`count_delay_ms` slows every count down; `GET /_mock/counts` lists the counting requests.

`GET /_mock/requests` lists what arrived (headers, body, the client's address), `DELETE` clears
it, and `GET /_mock/stats` counts requests, completions and cancellations (a client that went away).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Any

from aiohttp import web

DIRECTIVE = re.compile(r"\[mock ([^\]]*)\]")
DEFAULTS: dict[str, Any] = {
    "fault": "none",
    "chunks": 20,
    "delay_ms": 0,
    "first_delay_ms": 0,
    "reasoning": 0,
    "cached": 0,
    "usage": 1,
    "status": 500,
    "retry_after": 0,
    "count_delay_ms": 0,
}
TOKEN = re.compile(r"\w+|[^\w\s]")
MOCK_SYSTEM_PROMPT = "You are a mock model, made for tests."
RUNON_SAFETY_LIMIT = 100_000


class MockModel:
    def __init__(self, defaults: dict[str, Any]):
        self.defaults = dict(defaults)
        self.requests: deque[dict[str, Any]] = deque(maxlen=2000)
        self.stats = {"requests": 0, "completed": 0, "cancelled": 0, "in_flight": 0}
        self.counts: deque[dict[str, Any]] = deque(maxlen=2000)

    # -- control ---------------------------------------------------------------------------

    async def get_requests(self, request: web.Request) -> web.Response:
        return web.json_response(list(self.requests))

    async def get_counts(self, request: web.Request) -> web.Response:
        return web.json_response(list(self.counts))

    async def clear_requests(self, request: web.Request) -> web.Response:
        self.requests.clear()
        self.counts.clear()
        for key in self.stats:
            self.stats[key] = 0
        return web.json_response({"ok": True})

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats)

    async def set_config(self, request: web.Request) -> web.Response:
        self.defaults = {**DEFAULTS, **(await request.json())}
        return web.json_response(self.defaults)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": "mock-model", "object": "model"}]}
        )

    # -- counting tokens -------------------------------------------------------------------

    async def _count_body(self, request: web.Request) -> dict[str, Any]:
        body: dict[str, Any] = await request.json()
        self.counts.append({"path": request.path, "body": body})
        if self.defaults["count_delay_ms"]:
            await asyncio.sleep(int(self.defaults["count_delay_ms"]) / 1000)
        return body

    async def vllm_or_llama_cpp_tokenize(self, request: web.Request) -> web.Response:
        """vLLM's `/tokenize` (`messages` or `prompt`) and llama.cpp's (`content`)."""
        body = await self._count_body(request)
        if "content" in body:  # llama.cpp
            tokens = mock_tokens(body["content"])
            if body.get("add_special"):
                tokens = ["<bos>", *tokens]
            return web.json_response({"tokens": list(range(len(tokens)))})
        if "messages" in body:
            text = mock_chat_template(body["messages"], body.get("add_generation_prompt", True))
        else:
            text = body.get("prompt", "")
        count = len(mock_tokens(text))
        return web.json_response(
            {"count": count, "max_model_len": 32768, "tokens": list(range(count))}
        )

    async def llama_cpp_apply_template(self, request: web.Request) -> web.Response:
        body = await self._count_body(request)
        return web.json_response({"prompt": mock_chat_template(body["messages"], True)})

    async def llama_cpp_python_count(self, request: web.Request) -> web.Response:
        body = await self._count_body(request)
        return web.json_response({"count": 1 + len(mock_tokens(body["input"]))})  # BOS added

    # -- the chat API ----------------------------------------------------------------------

    def settings_for(self, body: dict[str, Any]) -> dict[str, Any]:
        settings = dict(self.defaults)
        for message in body.get("messages") or ():
            content = message.get("content")
            if isinstance(content, list):  # content parts (images beside text): their text
                content = "\n".join(
                    part.get("text") or "" for part in content if isinstance(part, dict)
                )
            if isinstance(content, str):
                for directive in DIRECTIVE.findall(content):
                    for pair in directive.split():
                        key, _, value = pair.partition("=")
                        settings[key] = value if key == "fault" else int(value)
        return settings

    async def chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.requests.append(
            {"headers": dict(request.headers), "body": body, "peer": list(peer or ())}
        )
        self.stats["requests"] += 1
        self.stats["in_flight"] += 1
        try:
            response = await self._chat(request, body, self.settings_for(body))
            self.stats["completed"] += 1
            return response
        except (asyncio.CancelledError, ConnectionResetError):
            self.stats["cancelled"] += 1
            raise
        finally:
            self.stats["in_flight"] -= 1

    async def _chat(
        self, request: web.Request, body: dict[str, Any], settings: dict[str, Any]
    ) -> web.StreamResponse:
        fault = settings["fault"]
        if settings["first_delay_ms"]:
            await asyncio.sleep(settings["first_delay_ms"] / 1000)
        if fault == "hang":
            await asyncio.sleep(3600)
        if fault == "reset":
            assert request.transport is not None
            request.transport.abort()
            raise ConnectionResetError
        if fault == "error500":
            return web.json_response(
                {
                    "object": "error",
                    "message": "The engine crashed.",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                },
                status=500,
            )
        if fault == "error400":
            return web.json_response(
                {
                    "object": "error",
                    "message": "top_k must be -1 or at least 1, got 0.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
                status=400,
            )

        if fault == "status":
            return web.json_response(
                {
                    "object": "error",
                    "message": f"The mock answers {settings['status']} as asked.",
                    "type": "MockError",
                    "param": None,
                    "code": settings["status"],
                },
                status=settings["status"],
                headers={"Retry-After": str(settings["retry_after"])}
                if settings["retry_after"]
                else None,
            )

        completion = Completion(body, settings)
        if not body.get("stream"):
            if settings["delay_ms"]:
                await asyncio.sleep(settings["delay_ms"] * len(completion.pieces) / 1000)
            return web.json_response(completion.as_json())

        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        # As a sticky load balancer in front of a model server would: a client that keeps
        # cookies sends it back on every later request.
        response.set_cookie("mock-affinity", f"request-{len(self.requests)}")
        await response.prepare(request)
        if fault == "garbage":
            await response.write(b"data: {this is not json\n\n")
            return response
        delay = settings["delay_ms"] / 1000
        for sent, event in enumerate(completion.events()):
            if delay and sent > 1:
                await asyncio.sleep(delay)
            if fault == "drop" and sent == 1 + len(completion.pieces) // 2:
                assert request.transport is not None
                request.transport.abort()  # drop mid-stream, no [DONE]
                return response
            if fault == "garbage_late" and sent == 3:
                await response.write(b"data: <html>oops</html>\n\n")
                return response
            await response.write(event)
            if fault == "runon" and sent % 64 == 63:
                await asyncio.sleep(0)  # let a cancellation in
        await response.write_eof()
        return response


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


def mock_tokens(text: str) -> list[str]:
    """The mock's tokenizer: a word or a punctuation mark is a token."""
    return TOKEN.findall(text)


def mock_chat_template(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    """ChatML, with a system prompt of the mock's own when the conversation has none (as
    SmolLM2's template does)."""
    parts = []
    if not messages or messages[0].get("role") != "system":
        parts.append(f"<|im_start|>system\n{MOCK_SYSTEM_PROMPT}<|im_end|>\n")
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content)
        parts.append(f"<|im_start|>{message.get('role')}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def build_app(defaults: dict[str, Any] | None = None) -> web.Application:
    model = MockModel({**DEFAULTS, **(defaults or {})})
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", model.chat)
    app.router.add_get("/v1/models", model.models)
    app.router.add_post("/tokenize", model.vllm_or_llama_cpp_tokenize)
    app.router.add_post("/apply-template", model.llama_cpp_apply_template)
    app.router.add_post("/extras/tokenize/count", model.llama_cpp_python_count)
    app.router.add_get("/_mock/counts", model.get_counts)
    app.router.add_get("/_mock/requests", model.get_requests)
    app.router.add_delete("/_mock/requests", model.clear_requests)
    app.router.add_get("/_mock/stats", model.get_stats)
    app.router.add_post("/_mock/config", model.set_config)
    app.router.add_get("/healthz", healthz)
    return app


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def main() -> None:
    parser = argparse.ArgumentParser(description="A mock vLLM-style model server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9001)
    parser.add_argument("--chunks", type=int, default=DEFAULTS["chunks"])
    parser.add_argument("--delay-ms", type=int, default=0)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    app = build_app({"chunks": args.chunks, "delay_ms": args.delay_ms})
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        handler_cancellation=True,  # a client that goes away cancels its handler
    )


if __name__ == "__main__":
    main()
