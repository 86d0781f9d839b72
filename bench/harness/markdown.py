"""Markdown for the report: a target's title, numbers, comparisons and table rows."""

from __future__ import annotations

from .metrics import TIMES

NONE = "\u2013"  # an en dash: not measured


def label(name: str) -> str:
    """A target's column title: direct, Mortar, Mortar@<commit>, LiteLLM."""
    kind, at, commit = name.partition("@")
    return {"mortar": "Mortar", "litellm": "LiteLLM"}.get(kind, kind) + at + commit


def fmt(value: float | None) -> str:
    """A number as the tables show it: three significant figures or so, thousands grouped."""
    if value is None:
        return NONE
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def compare(how: str, mortar: float | None, other: float | None) -> str:
    """`how` is "ratio" (mortar / other) or "added" (mortar - other)."""
    if mortar is None or other is None:
        return NONE
    if how == "added":
        return f"{mortar - other:+.2f}" if abs(mortar - other) < 100 else f"{mortar - other:+,.0f}"
    if other == 0:
        return NONE
    return f"{mortar / other:.2f}{TIMES}" if mortar / other < 10 else f"{mortar / other:.1f}{TIMES}"


def join_and(words: list[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def table_row(cells: list[str]) -> str:
    """A markdown table row."""
    return "| " + " | ".join(cells) + " |"
