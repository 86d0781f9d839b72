"""The prompt optimizer: shrink tool output without changing its meaning, and say what it did.

One entry point for the pipeline::

    messages, report = optimize(
        chat.messages,
        deployment_mode=deployment.optimizer_mode,
        organization_default=organization.optimizer_default,
        requested=mortar_headers.optimize,
    )
    headers["X-Mortar-Optimizer"] = report.header()

``messages`` is what to send upstream and count tokens on: the optimized prompt in ``on``
mode, the very list passed in (``is`` identical) in ``shadow`` and ``off``. The input is never
mutated. ``modes`` combines the three inputs, ``passes`` holds the rewrites, ``json_text`` the
JSON whitespace rules, ``report`` the header and stored form.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gateway.optimizer.modes import (
    DEFAULT_DEPLOYMENT_MODE,
    DEPLOYMENT_MODES,
    ORGANIZATION_DEFAULTS,
    OptimizerPlan,
    resolve_plan,
)
from gateway.optimizer.passes import (
    LOSSLESS_DEFAULTS,
    OPT_IN_PASSES,
    PASSES,
    RULESET,
    Message,
    run_passes,
)
from gateway.optimizer.report import OptimizerReport, prompt_bytes

__all__ = [
    "DEFAULT_DEPLOYMENT_MODE",
    "DEPLOYMENT_MODES",
    "LOSSLESS_DEFAULTS",
    "OPT_IN_PASSES",
    "ORGANIZATION_DEFAULTS",
    "PASSES",
    "RULESET",
    "OptimizerPlan",
    "OptimizerReport",
    "optimize",
    "resolve_plan",
]


def optimize(
    messages: list[Message],
    *,
    deployment_mode: str,
    organization_default: str,
    requested: Sequence[str],
    clock: Callable[[], int] = time.perf_counter_ns,
) -> tuple[list[Message], OptimizerReport]:
    """Optimize a normalized prompt as its modes say; return the prompt to use and the report."""
    plan = resolve_plan(
        deployment_mode=deployment_mode,
        organization_default=organization_default,
        requested=requested,
    )
    if plan.mode == "off":
        return messages, OptimizerReport(mode="off")

    started = clock()
    optimized, counts = run_passes(messages, plan.passes)
    before = prompt_bytes(messages)
    saved = before - prompt_bytes(optimized) if counts else 0
    elapsed_us = (clock() - started) // 1000
    report = OptimizerReport(
        mode=plan.mode, bytes=before, saved=saved, passes=counts, elapsed_us=elapsed_us
    )
    return (optimized if plan.mode == "on" else messages), report
