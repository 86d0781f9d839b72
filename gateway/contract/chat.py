"""A chat request as the pipeline works with it: validated and normalized."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.contract.request import NamedToolChoice


@dataclass
class ChatRequest:
    """A validated request: what the pipeline plans, generates and forwards from."""

    model: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = None
    include_usage: bool = False
    max_tokens: int | None = None
    user: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    # Set by the Messages surface (`gateway.anthropic.validation`), which chat fields can't say:
    # its `thinking` switch (forwarded as vLLM's `chat_template_kwargs.enable_thinking`), and
    # whether it held images (refused for a model without vision, not dropped).
    enable_thinking: bool | None = None
    has_images: bool = False

    @property
    def named_tool(self) -> str | None:
        if isinstance(self.tool_choice, dict):
            return self.tool_choice["function"]["name"]
        return None
