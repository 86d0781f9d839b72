"""Named tool selection: `X-Mortar-Tool-Select: named` keeps only the function `tool_choice` names.

An opt-in fast path for clients that send a whole catalogue though they already chose one
function. The report counts tokens with the prompt planner's counter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from core.errors import InvalidParameter
from gateway.contract.chat import ChatRequest
from gateway.tokens import TokenCounter


@dataclass(frozen=True)
class ToolSelection:
    tools_before: int
    tools_after: int
    tokens_before: int
    tokens_after: int

    def header(self) -> str:
        """`X-Mortar-Tool-Selector`: `mode=named; tools=20->1; tokens=2860->144; saved=2716`."""
        return (
            f"mode=named; tools={self.tools_before}->{self.tools_after}; "
            f"tokens={self.tokens_before}->{self.tokens_after}; "
            f"saved={self.tokens_before - self.tokens_after}"
        )

    def as_dict(self) -> dict[str, int | str]:
        return {"mode": "named", **asdict(self), "saved": self.tokens_before - self.tokens_after}


def select_named_tool(chat: ChatRequest, counter: TokenCounter) -> ToolSelection:
    """Drop every tool but the named one from `chat`, and say what that saved."""
    named = chat.named_tool
    if named is None or not chat.tools:
        raise InvalidParameter(
            "`X-Mortar-Tool-Select: named` needs an object-form `tool_choice` naming a function.",
            param="X-Mortar-Tool-Select",
        )
    before = chat.tools
    after = [tool for tool in before if tool["function"]["name"] == named]
    chat.tools = after
    return ToolSelection(
        tools_before=len(before),
        tools_after=len(after),
        tokens_before=counter.tools_tokens(before),
        tokens_after=counter.tools_tokens(after),
    )
