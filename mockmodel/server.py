"""A mock model server that speaks vLLM's dialect of the OpenAI chat API, and misbehaves on cue.

Tests and benchmarks start it as a real process (`python -m mockmodel --port N`). It answers
`POST /v1/chat/completions` as JSON or SSE like vLLM does (a first chunk with the role and empty
content, one chunk per token, the finish reason on the last content chunk, a usage chunk with
empty `choices` when `stream_options.include_usage`, `[DONE]`), with usage carrying
`prompt_tokens_details.cached_tokens`, streamed tool-call pieces and reasoning. A reply that would
hold one of the request's `stop` strings is cut before it, with the string in `stop_reason`.

Behaviour is set per request by a directive in the conversation's text, e.g.
`[mock fault=drop chunks=10 delay_ms=50]`, or for every request by `POST /_mock/config`
(`mockmodel.directives` lists them). The reply itself is `mockmodel.completion`'s.

It counts tokens as the model servers Mortar can ask do, with a tokenizer and a chat template
of its own (`mockmodel.tokens`): vLLM's `POST /tokenize` (`messages`, or a `prompt`), llama.cpp's
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
from collections import deque
from typing import Any

from aiohttp import web

from mockmodel.completion import Completion
from mockmodel.directives import DEFAULTS, settings_for
from mockmodel.tokens import mock_chat_template, mock_tokens


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
            response = await self._chat(request, body, settings_for(body, self.defaults))
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
