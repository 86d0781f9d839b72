"""Resolve and plan a request: validate it for its surface, resolve its model (one its key may
use) and session; then check its images (for a model with vision), select its tools, optimize
and count its prompt, and decide whether it streams.

`POST /v1/messages/count_tokens` runs the same steps up to the count (`prompt_plan`), so it
answers the count the route bills.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from accounts.models import ApiKey, Organization
from core.http.requests import ApiRequest
from core.tracing import step
from gateway.catalog.selectors import model_resolve
from gateway.contract.chat import ChatRequest
from gateway.contract.headers import MortarHeaders, read_mortar_headers
from gateway.contract.images import CheckedImage, vision_images
from gateway.errors import ModelNotAllowed
from gateway.models import CatalogModel, Deployment
from gateway.optimizer import OptimizerReport, optimize
from gateway.runs.stages import Accepted, Planned, Resolved
from gateway.sessions import end_user_for, session_for
from gateway.tokens import TokenCounter, default_counter
from gateway.tool_selector import ToolSelection, select_named_tool

# Counting takes ~1 ms per 40 KB of text; above this a prompt is counted off the event loop.
COUNT_IN_THREAD_BYTES = 256 * 1024


def wants_stream(stream: bool | None, accept_header: str, default: bool) -> bool:
    """An absent `stream` streams (the deployment may say otherwise), unless `Accept` asks for
    JSON and not an event stream: what the SDKs send for a call that does not stream."""
    if stream is not None:
        return stream
    accept_header = accept_header.lower()
    if "application/json" in accept_header and "text/event-stream" not in accept_header:
        return False
    return default


async def count_prompt(
    counter: TokenCounter,
    chat: ChatRequest,
    *,
    body_bytes: int,
    images: Sequence[CheckedImage] = (),
) -> int:
    """Count the prompt; a large one on a worker thread, so other streams don't stall."""
    if body_bytes < COUNT_IN_THREAD_BYTES:
        return counter.prompt_tokens(chat.messages, chat.tools, images)
    return await asyncio.to_thread(counter.prompt_tokens, chat.messages, chat.tools, images)


async def check_images(chat: ChatRequest, *, body_bytes: int) -> list[CheckedImage]:
    """A vision model's images, checked and put back into its messages (`vision_images`); a
    large body is checked on a worker thread: its base64 is decoded and encoded again."""
    if body_bytes < COUNT_IN_THREAD_BYTES:
        return vision_images(chat)
    return await asyncio.to_thread(vision_images, chat)


async def model_for(chat: ChatRequest, key: ApiKey) -> tuple[CatalogModel, Deployment]:
    """The model and its deployment, if the key may use it (its surface admits it or not
    after)."""
    model, deployment = await model_resolve(chat.model)
    if not key.allows_model(model.id):
        raise ModelNotAllowed(
            f"This API key may not use the model `{model.id}`; it may use: "
            + ", ".join(f"`{name}`" for name in key.allowed_models)
            + ".",
            param="model",
        )
    return model, deployment


async def resolve(accepted: Accepted, request: ApiRequest, body: bytes) -> Resolved:
    """The request validated for its surface, with its model, session and end user; raise a
    MortarError to refuse."""
    with step("validate"):
        chat = accepted.surface.validate(body)
        mortar_headers = read_mortar_headers(request)
    with step("plan"):
        model, deployment = await model_for(chat, accepted.key)
    session, _ = session_for(request.headers.get("X-Mortar-Session"), chat.user)
    end_user = end_user_for(request.headers.get("X-Mortar-End-User-Id"), chat.user)
    return Resolved(accepted, chat, mortar_headers, model, deployment, session, end_user)


@dataclass(frozen=True, slots=True)
class PromptPlan:
    """The prompt as it goes out: tools selected, optimized, counted."""

    tool_selection: ToolSelection | None
    optimizer_report: OptimizerReport
    counter: TokenCounter
    prompt_tokens: int


async def plan(resolved: Resolved, request: ApiRequest) -> Planned:
    """Check images, select tools, optimize and count the prompt of a resolved request, and
    decide whether it streams; raise a MortarError to refuse."""
    accepted, chat, model = resolved.prior, resolved.chat, resolved.model
    with step("plan"):
        accepted.surface.admit(model, chat)
        images: Sequence[CheckedImage] = ()
        if model.vision and chat.image_parts:
            # A model with vision gets its image parts, checked; any other keeps the text
            # alone (the parts were dropped when the body was validated).
            images = await check_images(chat, body_bytes=accepted.size)
        prompt = await prompt_plan(
            chat,
            resolved.mortar_headers,
            accepted.organization,
            resolved.deployment,
            body_bytes=accepted.size,
            images=images,
        )
        if accepted.surface.streams_by_default:
            stream = wants_stream(
                chat.stream,
                request.headers.get("Accept", "") or "",
                resolved.deployment.stream_default,
            )
        else:
            stream = chat.stream is True  # Anthropic's default: `stream` is false
    return Planned(
        resolved,
        tuple(images),
        prompt.tool_selection,
        prompt.optimizer_report,
        prompt.counter,
        prompt.prompt_tokens,
        stream,
    )


async def prompt_plan(
    chat: ChatRequest,
    mortar_headers: MortarHeaders,
    organization: Organization,
    deployment: Deployment,
    *,
    body_bytes: int,
    images: Sequence[CheckedImage] = (),
) -> PromptPlan:
    """Select tools, optimize and count the prompt of a resolved request."""
    counter = default_counter()
    tool_selection = None
    if mortar_headers.tool_select == "named":
        tool_selection = select_named_tool(chat, counter)
    chat.messages, optimizer_report = optimize(
        chat.messages,
        deployment_mode=deployment.optimizer_mode,
        organization_default=organization.optimize_default,
        requested=mortar_headers.optimize,
    )
    prompt_tokens = await count_prompt(counter, chat, body_bytes=body_bytes, images=images)
    return PromptPlan(tool_selection, optimizer_report, counter, prompt_tokens)
