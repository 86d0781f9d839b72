"""Forward a chat request to a deployment's model servers, and relay what comes back.

Only the fields Mortar forwards reach a model server (any other field a client sends is
ignored) — messages, tools, `tool_choice`, `parallel_tool_calls`, the planned output cap, the
range-checked sampling fields, and the deployment's `extra_fields` as the client sent them
(vLLM's `top_k`, `min_p`, `guided_json`, …; none unless listed) — plus what Mortar itself needs
to relay: the upstream's model name, `stream: true` and `stream_options.include_usage` (Mortar
always streams from the model server, so it can relay, time and cut the reply, and ask for its
usage). A Messages request's `thinking` becomes the server's reasoning switch, vLLM's
`chat_template_kwargs: {"enable_thinking": …}`. Nothing else: no key, no user, no headers.

A replica that fails before its first chunk is marked failed for a cool-down and the request
moves on to the next (`routing.py`); after the first chunk there is no retry. A model server
that runs on past `max_tokens` is stopped at three times it plus 64 tokens by Mortar's count
(a runaway generation is cut, and its `finish_reason` says `length`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from core.tracing import step
from gateway.contract.chat import ChatRequest
from gateway.errors import (
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.generation.reply import REASONING_FIELDS, Delta, Deltas, Generation
from gateway.models import Deployment
from gateway.tokens import TokenCounter
from gateway.upstream.client import ReplicaConfig, UpstreamStream, open_stream
from gateway.upstream.replicas import replica_health, route_session
from telemetry.metrics import upstream_failed


def runon_limit(max_tokens: int) -> int:
    return 3 * max_tokens + 64


def upstream_body(
    chat: ChatRequest,
    *,
    upstream_model: str,
    max_tokens: int,
    extra_fields: Sequence[str] = (),
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": upstream_model, "messages": chat.messages}
    if chat.tools is not None:
        body["tools"] = chat.tools
    if chat.tool_choice is not None:
        body["tool_choice"] = chat.tool_choice
    if chat.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = chat.parallel_tool_calls
    body["max_tokens"] = max_tokens
    body.update(chat.sampling)
    # The deployment's extra fields, as sent (never one Mortar sets: `extra_fields.py`).
    for name in extra_fields:
        value = chat.sent.get(name)
        if value is not None:
            body[name] = value
    if chat.enable_thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": chat.enable_thinking}
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    return body


@dataclass
class Forwarded:
    deltas: Deltas
    replica: str  # its URL, stored with the run for operators
    replica_name: str  # what the client is told (`replica_name`)
    session_kept: bool


async def forward(
    chat: ChatRequest,
    *,
    deployment: Deployment,
    session: str,
    max_tokens: int,
    body: bytes,
    generation: Generation,
    counter: TokenCounter,
) -> Forwarded:
    """Open the reply on the session's replica (or the next ones); raise if none answers."""
    route = route_session(session, deployment.upstreams, replica_health)
    failure: UpstreamError | None = None
    for replica in route.attempts:
        config = ReplicaConfig.for_deployment(deployment, replica)
        stream: UpstreamStream | None = None
        try:
            with step("upstream first byte"):
                async with asyncio.timeout(deployment.first_byte_timeout_s):
                    stream = await open_stream(config, body)
                    chunks = stream.chunks()
                    first = await anext(chunks)
        except UpstreamRejected as exc:
            generation.prompt_consumed = True
            upstream_failed(deployment.name, exc.code)
            raise  # the request's fault, not the replica's: another would refuse it too
        except (UpstreamError, TimeoutError, StopAsyncIteration) as exc:
            failure = _as_upstream_error(exc, config.name)
            if not isinstance(failure, UpstreamUnavailable):
                generation.prompt_consumed = True
            upstream_failed(deployment.name, failure.code)
        except BaseException:
            if stream is not None:
                await stream.aclose()
            raise
        else:
            relay = relay_chunks(
                first,
                chunks,
                stream,
                generation=generation,
                counter=counter,
                max_tokens=max_tokens,
                deployment=deployment,
            )
            return Forwarded(
                deltas=relay,
                replica=replica,
                replica_name=config.name,
                session_kept=replica == route.home,
            )
        if stream is not None:
            await stream.aclose()
        replica_health.mark_failed(replica)
    raise failure or UpstreamError("The deployment has no model servers.")


def _as_upstream_error(exc: BaseException, name: str) -> UpstreamError:
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"The model server {name} sent nothing in time.")
    return UpstreamError(f"The model server {name} ended its reply before any content.")


async def relay_chunks(
    first: list[dict[str, Any]],
    batches: AsyncIterator[list[dict[str, Any]]],
    stream: UpstreamStream,
    *,
    generation: Generation,
    counter: TokenCounter,
    max_tokens: int,
    deployment: Deployment,
) -> Deltas:
    """Yield the deltas of the model server's chunks, a list per batch of chunks that arrived
    together (never empty), filling in `generation` as they pass.

    The wait between chunks is the socket read timeout, lowered after the first chunk where
    `between_chunks` is shorter than the first-byte wait; the total time is checked at every
    batch.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deployment.total_timeout_s
    limit = runon_limit(max_tokens)
    # A token is at least one byte, so the tokens counted so far plus the bytes since are a
    # bound: the tokenizer runs only when that bound passes the limit, on the text since its
    # last count — for most replies never, for a long one every few hundred bytes near the end.
    tokens = 0  # counted
    uncounted: list[str] = []
    uncounted_bytes = 0
    batch = first
    if deployment.chunk_timeout_s < deployment.first_byte_timeout_s:
        stream.wait_between_chunks(deployment.chunk_timeout_s)
    try:
        while True:
            deltas: list[Delta] = []
            for chunk in batch:
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    generation.upstream_usage = usage
                for delta, finish_reason, matched_stop in _deltas_of(chunk):
                    if delta:
                        text = _delta_text(delta)
                        uncounted.append(text)
                        uncounted_bytes += len(text.encode())
                        if tokens + uncounted_bytes > limit:
                            tokens += counter.count("".join(uncounted))
                            uncounted.clear()
                            uncounted_bytes = 0
                            if tokens > limit:
                                generation.cut_by_mortar = True
                                generation.finish_reason = "length"
                                if deltas:
                                    yield deltas
                                return  # closing the stream stops the model server generating
                        generation.add_delta(delta)
                        deltas.append(delta)
                    if finish_reason:
                        generation.finish_reason = finish_reason
                        generation.matched_stop = matched_stop
            if deltas:
                yield deltas
            if loop.time() > deadline:
                raise UpstreamTimeout("The model server took too long in total.")
            try:
                batch = await anext(batches)
            except StopAsyncIteration:
                return
    except UpstreamError as exc:  # mid-stream: the run fails with it (counted once, here)
        upstream_failed(deployment.name, exc.code)
        raise
    finally:
        generation.count_later = counter.count
        await stream.aclose()


def _deltas_of(
    chunk: dict[str, Any],
) -> list[tuple[dict[str, Any], str | None, str | int | None]]:
    """The relayable delta of each choice (Mortar serves one), without the role or empties;
    with its finish reason and, when the server says, what stopped it (vLLM's `stop_reason`)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return []
    found = []
    for choice in choices[:1]:
        if not isinstance(choice, dict):
            continue
        raw = choice.get("delta")
        delta = {
            key: value
            for key, value in (raw.items() if isinstance(raw, dict) else ())
            if key != "role" and value is not None and value != ""
        }
        finish = choice.get("finish_reason")
        stop = choice.get("stop_reason")
        found.append(
            (
                delta,
                finish if isinstance(finish, str) else None,
                stop if isinstance(stop, str | int) and not isinstance(stop, bool) else None,
            )
        )
    return found


def _delta_text(delta: dict[str, Any]) -> str:
    """The generated text in a delta: content, reasoning, tool names and arguments."""
    parts = [
        delta[name] for name in ("content", *REASONING_FIELDS) if isinstance(delta.get(name), str)
    ]
    for call in delta.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.extend(
                function[key] for key in ("name", "arguments") if isinstance(function.get(key), str)
            )
    return "".join(parts)


def encode_body(body: dict[str, Any]) -> bytes:
    return orjson.dumps(body)
