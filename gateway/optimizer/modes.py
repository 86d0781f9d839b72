"""Which mode the optimizer runs in for one request, and with which passes.

Three inputs, combined as ``X-Mortar-Optimize`` is documented to:

- the deployment's mode: ``shadow`` (the default), ``on`` or ``off``;
- the organization's default: ``on`` or ``off``;
- the request's ``X-Mortar-Optimize`` values, as ``gateway.headers`` parsed them: ``()``,
  ``("off",)``, ``("on",)`` or opt-in pass names (``("json-tool-blocks", "collapse-spaces")``).

================  =========================  ==========  ===================================
deployment        request header             org         result
================  =========================  ==========  ===================================
``off``           anything                   anything    ``off`` ("no value turns it on")
``on``/``shadow`` ``off``                    anything    ``off`` (the prompt "exactly as sent")
``on``/``shadow`` ``on``                     anything    lossless defaults ("overriding an
                                                         organization default of ``off``")
``on``/``shadow`` opt-ins (with or w/o on)   anything    lossless defaults + those opt-ins
``on``/``shadow`` none                       ``on``      lossless defaults
``on``/``shadow`` none                       ``off``     ``off``
================  =========================  ==========  ===================================

A deployment in ``shadow`` then turns an ``on`` result into ``shadow``: the same passes run, to
measure what they would remove, and the prompt is used as sent.

Decisions the header's documentation leaves open:

1. ``shadow`` measures what ``on`` would do for *this* request, so when the request says
   ``off``, or sends nothing and its organization's default is ``off``, the result is ``off``
   there too: nothing runs and the report is ``ruleset=2; mode=off``. A shadow report then
   answers "what would turning this deployment on save?", and ``off`` always means the
   prompt was not even looked at.
2. Opt-in names imply the lossless defaults (``on`` is "the lossless defaults
   only"), and ``on`` next to opt-ins adds nothing: ``on, collapse-spaces`` is
   ``collapse-spaces``.
3. The order and repetition of header values do not matter; passes always run in pass order.
4. Unknown values, or ``off`` next to anything else, are a caller's bug here (``ValueError``):
   the header parser already answered them with a 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.optimizer.passes import LOSSLESS_DEFAULTS, OPT_IN_PASSES, PASSES

DEPLOYMENT_MODES = ("shadow", "on", "off")
DEFAULT_DEPLOYMENT_MODE = "shadow"
ORGANIZATION_DEFAULTS = ("on", "off")
REQUEST_VALUES = ("off", "on", *OPT_IN_PASSES)


@dataclass(frozen=True)
class OptimizerPlan:
    """What the optimizer does for one request: its mode and the passes it runs, in order."""

    mode: str  # "on", "shadow" or "off"
    passes: tuple[str, ...] = ()


OFF = OptimizerPlan(mode="off")


def resolve_plan(
    *, deployment_mode: str, organization_default: str, requested: Sequence[str]
) -> OptimizerPlan:
    """Combine the deployment's mode, the organization's default and `X-Mortar-Optimize`."""
    if deployment_mode not in DEPLOYMENT_MODES:
        raise ValueError(f"unknown deployment optimizer mode {deployment_mode!r}")
    if organization_default not in ORGANIZATION_DEFAULTS:
        raise ValueError(f"unknown organization optimizer default {organization_default!r}")
    unknown = [value for value in requested if value not in REQUEST_VALUES]
    if unknown:
        raise ValueError(f"unknown X-Mortar-Optimize values {unknown!r}")
    if "off" in requested and set(requested) != {"off"}:
        raise ValueError("X-Mortar-Optimize: off cannot be combined with other values")

    if deployment_mode == "off" or "off" in requested:
        return OFF
    if not requested and organization_default == "off":
        return OFF
    wanted = {*LOSSLESS_DEFAULTS, *requested}
    passes = tuple(name for name in PASSES if name in wanted)
    return OptimizerPlan(mode="shadow" if deployment_mode == "shadow" else "on", passes=passes)
