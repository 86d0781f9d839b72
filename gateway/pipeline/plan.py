"""Plan a request: validate it for its surface, resolve its model (one its key may use; and check
its images, for a model with vision), session, tools and prompt, count its tokens and plan its
output cap against the model's context window.

What was decided is kept in a `Plan`, filled in step by step: the one source of it. The
response's headers are rendered from it (`Plan.headers`) and the run is recorded from it
(`gateway.pipeline.record`), for a refusal half-way through as for a completion.
`POST /v1/messages/count_tokens` runs the same steps up to the count (`plan_prompt`), so it
answers the count the route bills.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from accounts.models import ApiKey, Organization
from billing.services.holds import HeldBudget
from billing.services.ratelimits import Limited
from core.errors import ContextLengthExceeded, ModelNotAllowed
from core.http.requests import ApiRequest
from core.tracing import step
from gateway.catalog.selectors import model_resolve
from gateway.contract.chat import ChatRequest
from gateway.contract.headers import MortarHeaders, read_mortar_headers
from gateway.contract.images import CheckedImage, vision_images
from gateway.coordination.dedupe import DedupeRequest, read_dedupe_request
from gateway.models import CatalogModel, Deployment
from gateway.optimizer import OptimizerReport, optimize
from gateway.pipeline.accept import Received
from gateway.pipeline.surface import Surface
from gateway.sessions import end_user_for, session_for
from gateway.tokens import TokenCounter, default_counter
from gateway.tool_selector import ToolSelection, select_named_tool

# Counting takes ~1 ms per 40 KB of text; above this a prompt is counted off the event loop.
COUNT_IN_THREAD_BYTES = 256 * 1024

DEFAULT_MAX_TOKENS = 1024
TEMPLATE_OVERHEAD = 32
MIN_REPLY_TOKENS = 64


def plan_output_cap(*, prompt_tokens: int, requested: int | None, context_window: int) -> int:
    """Return the reply's token cap, lowered to fit; refuse when under 64 tokens would be left.

    The prompt, the reply and 32 tokens of chat-template overhead must fit in the model's
    context window; if fewer than 64 tokens would be left for the reply, the request fails with
    `context_length_exceeded` (a reply that short is rarely what the client wanted).
    """
    room = context_window - prompt_tokens - TEMPLATE_OVERHEAD
    if room < MIN_REPLY_TOKENS:
        raise ContextLengthExceeded(
            f"The prompt is {prompt_tokens} tokens; with {TEMPLATE_OVERHEAD} tokens of template "
            f"overhead only {max(room, 0)} of the model's {context_window}-token context window "
            f"are left for the reply, fewer than {MIN_REPLY_TOKENS}. Start a new conversation or "
            "send fewer messages.",
            param="messages",
        )
    cap = DEFAULT_MAX_TOKENS if requested is None else requested
    return min(cap, room)


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


@dataclass
class Plan:
    """What the pipeline decided about one request, so far. Each field is set by the step that
    decides it (`plan` below, then routing and dedupe); a field still None was not reached."""

    run_id: str
    surface: Surface
    # What arrived (`accept.receive`), and the run it sends again for a re-run.
    received: Received | None = None
    rerun_of: str | None = None
    chat: ChatRequest | None = None
    model: CatalogModel | None = None
    deployment: Deployment | None = None
    session: str | None = None
    end_user: str | None = None
    tool_selection: ToolSelection | None = None
    optimizer_report: OptimizerReport | None = None
    counter: TokenCounter | None = None
    images: list[CheckedImage] = field(default_factory=list)
    prompt_tokens: int = 0
    counted: bool = False  # whether the prompt was counted: `prompt_tokens` holds the count
    max_tokens: int = 0
    stream: bool = True
    dedupe: DedupeRequest | None = None
    # The hold on the request's budgets (gateway/pipeline/budget.py), None when none applies.
    budget: HeldBudget | None = None
    # The rate limits checked (`limits.py`), for the headers.
    rate_limits: Limited | None = None
    # Decided after planning: the replica that answers (its name, never its URL), and this
    # request's dedupe role.
    replica: str | None = None
    dedupe_role: str | None = None
    # Whose answer this is: the run's own id, or the leader's for a shared answer.
    answered_by: str | None = None

    def headers(self) -> dict[str, str]:
        """The response's `X-Mortar-*` headers, and `x-ratelimit-*` for a request with rate
        limits, from what was decided."""
        headers = {
            "X-Mortar-Request-Id": self.answered_by or self.run_id,
            "X-Mortar-Run-Id": self.run_id,
        }
        if self.model is not None and self.deployment is not None:
            headers["X-Mortar-Deployment"] = self.deployment.name
            headers["X-Mortar-Model"] = self.model.id
        if self.session is not None:
            headers["X-Mortar-Session"] = self.session
        if self.tool_selection is not None:
            headers["X-Mortar-Tool-Selector"] = self.tool_selection.header()
        if self.optimizer_report is not None:
            headers["X-Mortar-Optimizer"] = self.optimizer_report.header()
        if self.dedupe_role is not None:
            headers["X-Mortar-Dedupe"] = self.dedupe_role
        if self.replica:
            headers["X-Mortar-Upstream"] = self.replica
        if self.rate_limits is not None:
            headers.update(self.rate_limits.headers())
        return headers


async def plan(
    request: ApiRequest,
    body: bytes,
    key: ApiKey,
    decided: Plan,
) -> None:
    """Validate, resolve, select tools, optimize, count and plan into `decided`; raise a
    MortarError to refuse."""
    with step("validate"):
        chat = decided.chat = decided.surface.validate(body)
        mortar_headers = read_mortar_headers(request)
    with step("plan"):
        await plan_validated(request, body, chat, mortar_headers, key, decided)


async def plan_validated(
    request: ApiRequest,
    body: bytes,
    chat: ChatRequest,
    mortar_headers: MortarHeaders,
    key: ApiKey,
    decided: Plan,
) -> None:
    """Resolve, select tools, optimize, count and plan a validated request into `decided`."""
    organization = key.organization
    model, deployment = await resolve(chat, decided, key)
    decided.surface.admit(model, chat)
    if model.vision and chat.image_parts:
        # A model with vision gets its image parts, checked; any other keeps the text alone
        # (the parts were dropped when the body was validated).
        decided.images = await check_images(chat, body_bytes=len(body))

    decided.session, _ = session_for(request.headers.get("X-Mortar-Session"), chat.user)
    decided.end_user = end_user_for(request.headers.get("X-Mortar-End-User-Id"), chat.user)
    await plan_prompt(chat, mortar_headers, organization, decided, body_bytes=len(body))
    decided.max_tokens = plan_output_cap(
        prompt_tokens=decided.prompt_tokens,
        requested=chat.max_tokens,
        context_window=model.context_window,
    )
    if decided.surface.streams_by_default:
        decided.stream = wants_stream(
            chat.stream, request.headers.get("Accept", "") or "", deployment.stream_default
        )
    else:
        decided.stream = chat.stream is True  # Anthropic's default: `stream` is false
    decided.dedupe = read_dedupe_request(request, body, streaming=decided.stream)


async def resolve(chat: ChatRequest, decided: Plan, key: ApiKey) -> tuple[CatalogModel, Deployment]:
    """Resolve the model and its deployment, if the key may use it (the surface admits it or
    not after)."""
    model = await model_resolve(chat.model)
    if not key.allows_model(model.id):
        raise ModelNotAllowed(
            f"This API key may not use the model `{model.id}`; it may use: "
            + ", ".join(f"`{name}`" for name in key.allowed_models)
            + ".",
            param="model",
        )
    deployment = model.deployment
    assert deployment is not None  # model_resolve only returns servable models
    decided.model, decided.deployment = model, deployment
    return model, deployment


async def plan_prompt(
    chat: ChatRequest,
    mortar_headers: MortarHeaders,
    organization: Organization,
    decided: Plan,
    *,
    body_bytes: int,
) -> None:
    """Select tools, optimize and count the prompt of a resolved request, into `decided`."""
    assert decided.deployment is not None
    counter = decided.counter = default_counter()
    if mortar_headers.tool_select == "named":
        decided.tool_selection = select_named_tool(chat, counter)

    chat.messages, decided.optimizer_report = optimize(
        chat.messages,
        deployment_mode=decided.deployment.optimizer_mode,
        organization_default=organization.optimize_default,
        requested=mortar_headers.optimize,
    )
    decided.prompt_tokens = await count_prompt(
        counter, chat, body_bytes=body_bytes, images=decided.images
    )
    decided.counted = True
