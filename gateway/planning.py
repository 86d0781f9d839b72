"""Plan the output cap against the model's context window (PRODUCT.md decision 6)."""

from __future__ import annotations

from gateway.errors import ContextLengthExceeded

DEFAULT_MAX_TOKENS = 1024
TEMPLATE_OVERHEAD = 32
MIN_REPLY_TOKENS = 64


def plan_output_cap(*, prompt_tokens: int, requested: int | None, context_window: int) -> int:
    """Return the reply's token cap, lowered to fit; refuse when under 64 tokens would be left.

    Spec: "The prompt, the reply and 32 tokens of chat-template overhead must fit in the model's
    context window … If fewer than 64 tokens would be left for the reply, the request fails
    with context_length_exceeded."
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
