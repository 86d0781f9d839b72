"""How the mock counts tokens: a tokenizer of its own (a word or a punctuation mark is a token)
and a ChatML chat template that adds a system prompt when the conversation has none."""

from __future__ import annotations

import json
import re
from typing import Any

TOKEN = re.compile(r"\w+|[^\w\s]")
MOCK_SYSTEM_PROMPT = "You are a mock model, made for tests."


def mock_tokens(text: str) -> list[str]:
    """The mock's tokenizer: a word or a punctuation mark is a token."""
    return TOKEN.findall(text)


def mock_chat_template(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    """ChatML, with a system prompt of the mock's own when the conversation has none (as
    SmolLM2's template does)."""
    parts = []
    if not messages or messages[0].get("role") != "system":
        parts.append(f"<|im_start|>system\n{MOCK_SYSTEM_PROMPT}<|im_end|>\n")
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content)
        parts.append(f"<|im_start|>{message.get('role')}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)
