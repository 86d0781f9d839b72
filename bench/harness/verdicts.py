"""The report's verdicts: Mortar against its targets, after against before, and what spend
control adds to a request."""

from __future__ import annotations

import statistics
from typing import Any

from .metrics import METRICS, SCENARIO_LABELS, TIMES, target_names
from .scenarios import MESSAGES_TWINS

# After vs before: each throughput and latency measure within 5% of before, or better.
BEFORE_AFTER_TOLERANCE = 0.05
# What the budget and rate-limit checks may add to a request: Mortar's CPU.
SPEND_CONTROL_BUDGET_MS = 0.15
# Messages: each scenario's throughput within 10% of its chat completions twin's, or better.
MESSAGES_TOLERANCE = 0.10


def targets_check(
    table: dict[str, dict[str, float | None]], runs: list[dict[str, Any]]
) -> list[tuple[str, str, str]]:
    """The targets for the working tree's Mortar, against direct and LiteLLM: verdict and what
    was measured."""

    def v(key: str, target: str) -> float | None:
        return table[key].get(target)

    checks = []

    def ratio_check(name: str, key: str, goal: float) -> None:
        m, lite = v(key, "mortar"), v(key, "litellm")
        if m is None or not lite:
            checks.append((name, "not measured", ""))
            return
        ratio = m / lite
        verdict = "met" if ratio >= goal else "NOT met"
        checks.append((name, verdict, f"{ratio:.1f}{TIMES} LiteLLM (goal ≥ {goal:g}{TIMES})"))

    def added_check(name: str, key: str, goal: float) -> None:
        m, d = v(key, "mortar"), v(key, "direct")
        if m is None or d is None:
            checks.append((name, "not measured", ""))
            return
        added = m - d
        verdict = "met" if added <= goal else "NOT met"
        miss = "" if added <= goal else f", {added - goal:.2f} ms over"
        checks.append((name, verdict, f"+{added:.2f} ms over direct (goal ≤ {goal:g} ms{miss})"))

    ratio_check(f"Non-streaming ≥ 10{TIMES} LiteLLM's req/s", "json_rps", 10)
    ratio_check(f"20-chunk streams ≥ 15{TIMES} LiteLLM's streams/s", "stream_rps", 15)
    added_check("Added p50 latency, non-streaming, one connection ≤ 2 ms", "one_json_p50", 2)
    added_check("Added p50 latency, whole 20-chunk stream ≤ 3 ms", "one_stream_p50", 3)
    # "None stalls" holds only if it holds in every round, not in the median one.
    bad = [
        run["result"]["stalled"] + run["result"]["failed"] + run["result"]["unfinished"]
        for run in runs
        if run["scenario"] == "slow-1000" and run["target"] == "mortar"
    ]
    if bad:
        checks.append(
            (
                "1,000 slow streams: none stalls",
                "met" if max(bad) == 0 else "NOT met",
                "stalled, failed or unfinished per round: " + ", ".join(str(b) for b in bad),
            )
        )
    else:
        checks.append(("1,000 slow streams: none stalls", "not measured", ""))
    added_check("1,000 slow streams: p99 added gap ≤ 10 ms", "slow_gap_p99", 10)
    return checks


def before_after_check(
    table: dict[str, dict[str, float | None]], before: str, after: str = "mortar"
) -> list[tuple[str, str, str]]:
    """Each throughput and latency measure: after / before, and whether it is within 5% of
    before or better."""
    checks = []
    for metric in METRICS:
        if metric.unit not in ("req/s", "streams/s", "ms"):
            continue
        name = metric.title
        if name.startswith(" "):  # a sub-row: say which scenario it belongs to
            name = f"{SCENARIO_LABELS[metric.scenario]}: {name.strip()}"
        new, old = table[metric.key].get(after), table[metric.key].get(before)
        if new is None or not old:
            checks.append((name, "not measured", ""))
            continue
        ratio = new / old
        better = ratio > 1 if metric.higher_is_better else ratio < 1
        worse_by = (1 - ratio) if metric.higher_is_better else (ratio - 1)
        if better:
            verdict = "better"
        elif worse_by <= BEFORE_AFTER_TOLERANCE:
            verdict = "within 5%"
        else:
            verdict = "NOT within 5%"
        checks.append((name, verdict, f"{ratio:.3f}{TIMES} ({_plain(old)} → {_plain(new)})"))
    return checks


def _plain(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def spend_control_check(
    metered: dict[str, Any], unmetered: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """What the budget and rate-limit checks add to a request — Mortar's CPU (the
    budget: ≤ 0.15 ms), and beside it Postgres's and Redis's — from the working tree's Mortar
    with everything configured and its unmetered twin, per scenario at 32 connections."""
    checks = []
    for scenario, label in (("json-32", "Non-streaming"), ("stream-32", "20-chunk stream")):
        on, off = metered.get(scenario), unmetered.get(scenario)
        if not on or not off:
            checks.append((label, "not measured", ""))
            continue
        added = on["mortar_cpu_ms"] - off["mortar_cpu_ms"]
        verdict = "met" if added <= SPEND_CONTROL_BUDGET_MS else "NOT met"
        checks.append(
            (
                label,
                verdict,
                f"Mortar {added:+.3f} ms CPU ({off['mortar_cpu_ms']:.3f} → "
                f"{on['mortar_cpu_ms']:.3f}; goal ≤ {SPEND_CONTROL_BUDGET_MS:g}); Postgres "
                f"{on['postgres_cpu_ms'] - off['postgres_cpu_ms']:+.3f} ms, Redis "
                f"{on['redis_cpu_ms'] - off['redis_cpu_ms']:+.3f} ms",
            )
        )
    return checks


def messages_check(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target measured on Messages: each Messages scenario's throughput beside its chat
    completions twin's (medians over rounds, and their ratio in each round), and whether it is
    within 10% of it, or better."""
    rows = []
    for target in target_names(runs):
        for messages, chat in MESSAGES_TWINS.items():
            rps: dict[str, dict[int, float]] = {
                scenario: {
                    run["round"]: run["result"]["rps"]
                    for run in runs
                    if run["target"] == target
                    and run["scenario"] == scenario
                    and "rps" in run["result"]
                }
                for scenario in (chat, messages)
            }
            if not rps[chat] or not rps[messages]:
                continue
            chat_rps = statistics.median(rps[chat].values())
            messages_rps = statistics.median(rps[messages].values())
            ratio = messages_rps / chat_rps if chat_rps else None
            rounds = sorted(set(rps[chat]) & set(rps[messages]))
            rows.append(
                {
                    "target": target,
                    "scenario": messages,
                    "chat": chat_rps,
                    "messages": messages_rps,
                    "ratio": ratio,
                    "round_ratios": [
                        round(rps[messages][r] / rps[chat][r], 2) for r in rounds if rps[chat][r]
                    ],
                    "verdict": "met"
                    if ratio is not None and ratio >= 1 - MESSAGES_TOLERANCE
                    else "NOT met",
                }
            )
    return rows
