"""The chat-completions pipeline, in the order a request goes through it.

    accept → authenticate → plan (read body → validate → resolve model → session → tool
    selector → prompt optimizer → count tokens, plan the output cap) → dedupe → generate
    (scripted, or forward to the session's replica) → relay chunks → record

Each step is a small function with one job; this module only puts them in order. A refused
request (4xx) is still recorded as a run of the key's organization, with the body as received
and the error body as sent. Only a request without a valid key is not a run: it has no
organization to belong to.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson
from django.conf import settings
from django.http import HttpResponse

from gateway.api_request import ApiRequest
from gateway.auth import authenticate
from gateway.chunks import ChunkEncoder
from gateway.dedupe import Answer, Claim, DedupeRequest, in_flight_board, read_dedupe_request
from gateway.errors import MortarError, RequestTooLarge, UpstreamTimeout
from gateway.forwarding import encode_body, forward, upstream_body
from gateway.generation import Generation
from gateway.headers import read_mortar_headers
from gateway.ids import new_hex_id
from gateway.live import live_generations
from gateway.models import CatalogModel, Deployment, Organization
from gateway.optimizer import OptimizerReport, optimize
from gateway.planning import plan_output_cap
from gateway.responses import error_response
from gateway.scripted import ScriptedModel, one_per_batch
from gateway.selectors import model_resolve
from gateway.sessions import end_user_for, session_for
from gateway.streaming import EventStream, Relay, json_response, streaming_response
from gateway.tokens import TokenCounter, default_counter
from gateway.tool_selector import select_named_tool
from gateway.validation import ChatRequest, parse_json_body, validate_chat_request
from telemetry.costs import Prices
from telemetry.events import event_publisher
from telemetry.models import Run
from telemetry.recording import RunRecorder
from telemetry.writer import run_writer

# Counting takes ~1 ms per 40 KB of text; above this a prompt is counted off the event loop.
COUNT_IN_THREAD_BYTES = 256 * 1024
# A refused body is kept for debugging, but a 4 MiB one is not worth keeping whole.
REFUSED_BODY_KEEP_BYTES = 64 * 1024


@dataclass(frozen=True)
class Accepted:
    completion_id: str
    accepted_at: datetime
    created: int


def accept() -> Accepted:
    """Give the request its completion id (`chatcmpl-` + 24 hex) and acceptance time."""
    now = time.time()
    return Accepted(
        completion_id=f"chatcmpl-{new_hex_id()}",
        accepted_at=datetime.fromtimestamp(now, UTC),
        created=int(now),
    )


def read_body(request: ApiRequest, recorder: RunRecorder) -> bytes:
    body, size = request.body, request.body_size
    limit = settings.MORTAR_MAX_BODY_BYTES
    if size > limit:
        recorder.set(
            request_body=body[:REFUSED_BODY_KEEP_BYTES],
            request_bytes=size,
            request_truncated=True,
        )
        raise RequestTooLarge(
            f"The request body is {size} bytes; the limit is {limit} bytes (4 MiB)."
        )
    recorder.set(request_body=body, request_bytes=len(body))
    return body


async def count_prompt(counter: TokenCounter, chat: ChatRequest, *, body_bytes: int) -> int:
    """Count the prompt; a large one on a worker thread, so other streams don't stall."""
    if body_bytes < COUNT_IN_THREAD_BYTES:
        return counter.prompt_tokens(chat.messages, chat.tools)
    return await asyncio.to_thread(counter.prompt_tokens, chat.messages, chat.tools)


def wants_stream(stream: bool | None, accept_header: str, default: bool) -> bool:
    """PRODUCT.md decision 1: absent `stream` streams, unless Accept asks for JSON only."""
    if stream is not None:
        return stream
    accept_header = accept_header.lower()
    if "application/json" in accept_header and "text/event-stream" not in accept_header:
        return False
    return default


async def chat_completion(request: ApiRequest) -> HttpResponse | EventStream:
    accepted = accept()
    try:
        key = await authenticate(request)
    except MortarError as error:
        return error_response(error)  # not a run: no organization to own it, so no run id
    headers = {
        "X-Mortar-Request-Id": accepted.completion_id,
        "X-Mortar-Run-Id": accepted.completion_id,
    }
    organization = key.organization
    recorder = RunRecorder(
        run_id=accepted.completion_id,
        accepted_at=accepted.accepted_at,
        organization_id=organization.id,
        writer=run_writer(),
        events=event_publisher(),
        keep_content=organization.retention == Organization.Retention.FULL,
    )
    recorder.set(api_key_id=key.id, request_id=request.request_id)

    try:
        planned = await plan(request, organization, recorder, headers)
        claim = None
        if planned.dedupe is not None:
            claim = await in_flight_board().claim(
                organization.id, planned.dedupe, accepted.completion_id
            )
    except MortarError as error:
        return refuse(error, recorder, headers)

    if claim is None:
        return await generate(planned, accepted, organization, recorder, headers)
    if claim.role == "shared":
        return await share(claim, planned, recorder, headers)
    headers["X-Mortar-Dedupe"] = "leader"
    recorder.set(dedupe_role="leader")
    try:
        response = await generate(planned, accepted, organization, recorder, headers)
    except BaseException:
        await claim.abandon()
        raise
    await claim.answer(response)
    return response


@dataclass
class Planned:
    """A validated request with everything decided before generation starts."""

    chat: ChatRequest
    model: CatalogModel
    deployment: Deployment
    session: str
    counter: TokenCounter
    prompt_tokens: int
    max_tokens: int
    stream: bool
    optimizer_report: OptimizerReport
    dedupe: DedupeRequest | None


async def plan(
    request: ApiRequest,
    organization: Organization,
    recorder: RunRecorder,
    headers: dict[str, str],
) -> Planned:
    """Read, validate, resolve, select tools, optimize, count and plan; raise to refuse."""
    body = read_body(request, recorder)
    chat = validate_chat_request(parse_json_body(body))
    mortar_headers = read_mortar_headers(request)

    model = await model_resolve(chat.model)
    deployment = model.deployment
    assert deployment is not None  # model_resolve only returns servable models
    headers["X-Mortar-Deployment"] = deployment.name
    headers["X-Mortar-Model"] = model.id
    recorder.set(model=model.id, deployment=deployment.name)

    session, _ = session_for(request.headers.get("X-Mortar-Session"), chat.user)
    headers["X-Mortar-Session"] = session
    recorder.set(
        session=session,
        end_user=end_user_for(request.headers.get("X-Mortar-End-User-Id"), chat.user),
    )

    counter = default_counter()
    if mortar_headers.tool_select == "named":
        selection = select_named_tool(chat, counter)
        headers["X-Mortar-Tool-Selector"] = selection.header()
        recorder.set(tool_selector_report=selection.as_dict())

    chat.messages, optimizer_report = optimize(
        chat.messages,
        deployment_mode=deployment.optimizer_mode,
        organization_default=organization.optimize_default,
        requested=mortar_headers.optimize,
    )
    headers["X-Mortar-Optimizer"] = optimizer_report.header()
    recorder.set(optimizer_report=optimizer_report.as_dict())

    prompt_tokens = await count_prompt(counter, chat, body_bytes=len(body))
    recorder.set(prompt_tokens=prompt_tokens)
    max_tokens = plan_output_cap(
        prompt_tokens=prompt_tokens,
        requested=chat.max_tokens,
        context_window=model.context_window,
    )
    stream = wants_stream(chat.stream, request.headers.get("Accept", ""), deployment.stream_default)
    return Planned(
        chat=chat,
        model=model,
        deployment=deployment,
        session=session,
        counter=counter,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        optimizer_report=optimizer_report,
        dedupe=read_dedupe_request(request, body, streaming=stream),
    )


async def generate(
    planned: Planned,
    accepted: Accepted,
    organization: Organization,
    recorder: RunRecorder,
    headers: dict[str, str],
) -> HttpResponse | EventStream:
    """Generate — scripted, or forwarded to the session's replica — and relay it."""
    chat, model, deployment = planned.chat, planned.model, planned.deployment
    forwarding = deployment.kind == Deployment.Kind.UPSTREAM
    upstream_request = None
    if forwarding:
        upstream_request = encode_body(
            upstream_body(
                chat,
                upstream_model=deployment.upstream_model or model.id,
                max_tokens=planned.max_tokens,
            )
        )
    recorder.open(
        stream=planned.stream, max_tokens=planned.max_tokens, upstream_request=upstream_request
    )
    recorder.publish("optimizer.report", report=planned.optimizer_report.as_dict())
    live = live_generations()

    async def release() -> None:
        await live.unregister(accepted.completion_id)

    generation = Generation()
    try:
        stop = await live.register(accepted.completion_id, organization.id)
        if forwarding:
            assert upstream_request is not None
            forwarded = await forward(
                chat,
                deployment=deployment,
                session=planned.session,
                max_tokens=planned.max_tokens,
                body=upstream_request,
                generation=generation,
                counter=planned.counter,
            )
            headers["X-Mortar-Upstream"] = forwarded.replica
            recorder.routed(
                deployment=deployment.name,
                replica=forwarded.replica,
                session_kept=forwarded.session_kept,
            )
            deltas = forwarded.deltas
            ping_interval: float | None = settings.MORTAR_PING_SECONDS
        else:
            recorder.routed(deployment=deployment.name, replica="", session_kept=None)
            scripted = ScriptedModel(counter=planned.counter, delay_ms=deployment.scripted_delay_ms)
            deltas = one_per_batch(
                scripted.generate(chat, max_tokens=planned.max_tokens, generation=generation)
            )
            ping_interval = None
    except MortarError as error:
        await release()
        return refuse(error, recorder, headers)
    except BaseException:
        # The client went away while the model server was being reached.
        recorder.close(
            status=Run.Status.CANCELLED, http_status=499, error_code="client_disconnected"
        )
        await release()
        raise

    relay = Relay(
        deltas=deltas,
        generation=generation,
        encoder=ChunkEncoder(
            completion_id=accepted.completion_id, created=accepted.created, model=model.id
        ),
        recorder=recorder,
        prompt_tokens=planned.prompt_tokens,
        headers=headers,
        prices=Prices(
            input=model.price_input,
            cached_input=model.price_cached_input,
            output=model.price_output,
        ),
        ping_interval=ping_interval,
        stop=stop,
        release=release,
    )
    if planned.stream:
        return streaming_response(relay, include_usage=chat.include_usage)
    return await json_response(relay)


async def share(
    claim: Claim, planned: Planned, recorder: RunRecorder, headers: dict[str, str]
) -> HttpResponse:
    """Return the leader's answer as this request's own, stored as a run of its own.

    A shared run costs nothing: the leader's run carries the generation's cost.
    """
    try:
        async with asyncio.timeout(planned.deployment.total_timeout_s + 30):
            answer = await claim.wait()
    except TimeoutError:
        return refuse(UpstreamTimeout("The shared generation took too long."), recorder, headers)
    except MortarError as error:
        return refuse(error, recorder, headers)
    headers.update({"X-Mortar-Dedupe": "shared", "X-Mortar-Request-Id": claim.leader_id})
    response = HttpResponse(
        answer.body, status=answer.status, content_type=answer.content_type, headers=headers
    )
    usage = shared_usage(answer)
    recorder.chunk(answer.body)
    recorder.close(
        status=Run.Status.COMPLETED if answer.status == 200 else Run.Status.FAILED,
        http_status=answer.status,
        dedupe_role="shared",
        dedupe_leader=claim.leader_id,
        usage=usage,
        usage_source=Run.UsageSource.UPSTREAM if usage else "",
        completion_tokens=(usage or {}).get("completion_tokens"),
        total_tokens=(usage or {}).get("total_tokens"),
        cost=Decimal(0),
    )
    return response


def shared_usage(answer: Answer) -> dict[str, Any] | None:
    """The leader's usage, as the shared body reports it (recorded, but never billed twice)."""
    if answer.status != 200 or not answer.content_type.startswith("application/json"):
        return None
    usage = orjson.loads(answer.body).get("usage")
    return usage if isinstance(usage, dict) else None


def refuse(error: MortarError, recorder: RunRecorder, headers: dict[str, str]) -> HttpResponse:
    """Answer with the error envelope, and record the run with it."""
    response = error_response(error, headers)
    recorder.chunk(response.content)
    recorder.close(
        status=Run.Status.REFUSED if error.status < 500 else Run.Status.FAILED,
        http_status=error.status,
        error_code=error.code,
        error_message=error.message,
    )
    return response
