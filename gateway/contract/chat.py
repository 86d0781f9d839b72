"""A chat request as the pipeline works with it: validated and normalized."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.contract.messages import AnyPart
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
    # The content parts of each message that carried an `image_url` part, by the message's
    # index, as sent: `messages` has their text joined, as for any model; for a model with
    # vision, `gateway.contract.images.vision_images` checks them and puts them back.
    image_parts: dict[int, list[AnyPart]] = field(default_factory=dict)
    # Set by the Messages surface (`gateway.surfaces.messages.validation`), which chat fields
    # can't say: its `thinking` switch (forwarded as vLLM's
    # `chat_template_kwargs.enable_thinking`), and whether it held images (refused for a model
    # without vision, not dropped).
    enable_thinking: bool | None = None
    has_images: bool = False
    # The body as the client sent it, decoded: a deployment's extra fields (vLLM's `top_k`, …)
    # are read from it when forwarded (`gateway.generation.forwarding.upstream_body`).
    sent: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def named_tool(self) -> str | None:
        if isinstance(self.tool_choice, dict):
            return self.tool_choice["function"]["name"]
        return None


def content_text(content: str | list[dict[str, Any]] | None) -> str:
    """A normalized message's text: its content, or the text parts of a vision model's content
    parts joined with line breaks (as for a model without vision)."""
    if isinstance(content, list):
        return "\n".join(part["text"] for part in content if part["type"] == "text")
    return content or ""
