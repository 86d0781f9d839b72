"""The optimizer's report: the `X-Mortar-Optimizer` header, the stored row, the telemetry event.

``bytes`` is the prompt's size before optimization: the UTF-8 bytes of every message's
``content`` and every tool call's ``function.arguments`` (the text the passes may rewrite;
roles, names and ids are left out). ``saved`` is how many of those bytes the passes removed, or
in ``shadow`` mode would have removed. ``passes`` lists each pass that changed something, with
its count, in pass order; when none did the header says ``passes=`` with nothing after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gateway.optimizer.passes import RULESET, Message


@dataclass(frozen=True)
class OptimizerReport:
    """What the optimizer did to one prompt, or would have done in shadow mode."""

    mode: str  # "on", "shadow" or "off"
    ruleset: int = RULESET
    bytes: int = 0
    saved: int = 0
    passes: tuple[tuple[str, int], ...] = ()
    elapsed_us: int = 0

    def header(self) -> str:
        """Render the `X-Mortar-Optimizer` value in its documented format."""
        if self.mode == "off":
            return f"ruleset={self.ruleset}; mode=off"
        passes = ",".join(f"{name}/{count}" for name, count in self.passes)
        return (
            f"ruleset={self.ruleset}; mode={self.mode}; bytes={self.bytes}; saved={self.saved}; "
            f"passes={passes}; elapsed_us={self.elapsed_us}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data; `off` carries only what its header says."""
        if self.mode == "off":
            return {"ruleset": self.ruleset, "mode": "off"}
        return {
            "ruleset": self.ruleset,
            "mode": self.mode,
            "bytes": self.bytes,
            "saved": self.saved,
            # A list, not an object: jsonb does not keep key order, and pass order matters.
            "passes": [{"name": name, "count": count} for name, count in self.passes],
            "elapsed_us": self.elapsed_us,
        }


def prompt_bytes(messages: Iterable[Message]) -> int:
    """Count the UTF-8 bytes of all message contents and tool-call arguments."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += _utf8_length(content)
        for call in message.get("tool_calls") or ():
            arguments = (call.get("function") or {}).get("arguments")
            if isinstance(arguments, str):
                total += _utf8_length(arguments)
    return total


def _utf8_length(text: str) -> int:
    # An ASCII str's length is its UTF-8 length; isascii() is O(1) on CPython.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
