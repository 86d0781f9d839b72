"""Named tool selection: `X-Mortar-Tool-Select: named` keeps only the function `tool_choice` names.

An opt-in fast path for clients that send a whole catalogue though they already chose one
function (spec, request headers). The report counts tokens with the prompt planner's counter.
"""

from __future__ import annotations

from gateway.errors import InvalidParameter
from gateway.tokens import TokenCounter
from gateway.validation import ChatRequest


def select_named_tool(chat: ChatRequest, counter: TokenCounter) -> str:
    """Drop every tool but the named one from `chat`; return the `X-Mortar-Tool-Selector` report."""
    named = chat.named_tool
    if named is None or not chat.tools:
        raise InvalidParameter(
            "`X-Mortar-Tool-Select: named` needs an object-form `tool_choice` naming a function.",
            param="X-Mortar-Tool-Select",
        )
    before = chat.tools
    after = [tool for tool in before if tool["function"]["name"] == named]
    tokens_before = counter.tools_tokens(before)
    tokens_after = counter.tools_tokens(after)
    chat.tools = after
    return (
        f"mode=named; tools={len(before)}->{len(after)}; "
        f"tokens={tokens_before}->{tokens_after}; saved={tokens_before - tokens_after}"
    )
