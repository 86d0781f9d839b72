"""Mortar's own request headers: the optimizer switch and named tool selection."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import InvalidParameter
from core.http.requests import ApiRequest
from gateway.optimizer import OPT_IN_PASSES

OPTIMIZE_VALUES = {"off", "on"}
OPTIMIZE_PASSES = set(OPT_IN_PASSES)


@dataclass(frozen=True)
class MortarHeaders:
    optimize: tuple[str, ...]
    tool_select: str | None


def read_mortar_headers(request: ApiRequest) -> MortarHeaders:
    """Validate `X-Mortar-Optimize` and `X-Mortar-Tool-Select`; unknown values are a 400."""
    raw = request.headers.get("X-Mortar-Optimize", "").strip()
    values = tuple(v.strip().lower() for v in raw.split(",") if v.strip()) if raw else ()
    for value in values:
        if value not in OPTIMIZE_VALUES | OPTIMIZE_PASSES:
            raise InvalidParameter(
                f"`X-Mortar-Optimize` has the unknown value {value!r}; use off, on, "
                + ", ".join(sorted(OPTIMIZE_PASSES))
                + ".",
                param="X-Mortar-Optimize",
            )
    if "off" in values and len(values) > 1:
        raise InvalidParameter(
            "`X-Mortar-Optimize: off` cannot be combined with other values.",
            param="X-Mortar-Optimize",
        )

    tool_select = request.headers.get("X-Mortar-Tool-Select", "").strip().lower() or None
    if tool_select is not None and tool_select != "named":
        raise InvalidParameter(
            f"`X-Mortar-Tool-Select` has the unknown value {tool_select!r}; the only one is "
            "`named`.",
            param="X-Mortar-Tool-Select",
        )
    return MortarHeaders(optimize=values, tool_select=tool_select)
