"""Admit a planned request: the output cap that fits its model's context window, its dedupe
request, its rate limits (`billing.services.ratelimits`), then its hold on its budgets
(`billing.services.holds`) — before dedupe and generation.

The prompt and the whole output cap are held at the model's prices; a budget that cannot pay
the whole cap lowers it — so output stops when its cost reaches the hold — and one that cannot
pay the prompt and one token refuses with 402. The hold is the run's: its close charges it.
"""

from __future__ import annotations

from billing.services.holds import hold_for
from billing.services.ratelimits import rate_limits_take
from core.http.requests import ApiRequest
from gateway.coordination.dedupe import read_dedupe_request
from gateway.errors import ContextLengthExceeded
from gateway.runs.stages import Held, Limited, Planned

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


async def limits_take(planned: Planned, request: ApiRequest) -> Limited:
    """The limits the request runs under: its output cap (refused when the prompt leaves too
    little room), its dedupe request (refused when asked for wrongly), and its organization's
    and key's rate limits, taken — admitted or not, `Limited.refusal` says."""
    resolved = planned.resolved
    max_tokens = plan_output_cap(
        prompt_tokens=planned.prompt_tokens,
        requested=resolved.chat.max_tokens,
        context_window=resolved.model.context_window,
    )
    dedupe = read_dedupe_request(request, resolved.prior.body, streaming=planned.stream)
    rate_limits = await rate_limits_take(
        key=resolved.prior.key, prompt_tokens=planned.prompt_tokens
    )
    return Limited(planned, max_tokens, dedupe, rate_limits)


async def budget_hold(limited: Limited) -> Held:
    """Hold on the organization's and the key's budgets, lowering the output cap to what they
    can pay; raise InsufficientQuota to refuse."""
    planned = limited.prior
    resolved = planned.resolved
    budget = await hold_for(
        run_id=resolved.prior.run_id,
        key=resolved.prior.key,
        prompt_tokens=planned.prompt_tokens,
        max_tokens=limited.max_tokens,
        prices=resolved.model.prices,
        total_timeout_s=resolved.deployment.total_timeout_s,
    )
    return Held(limited, budget, limited.max_tokens if budget is None else budget.max_tokens)
