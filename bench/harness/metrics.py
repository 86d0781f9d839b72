"""From raw measurements to the report's numbers: medians over rounds, CPU per request, the
verdicts on issue 8's targets and on after vs before, and one worker against two."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .constants import SLOW_DELAY_MS
from .mortar import SCALING_SCENARIOS, TWO_WORKERS
from .targets import ordered, target_kind

TIMES = "\u00d7"  # the multiplication sign of ratios
BEFORE_AFTER_TOLERANCE = 0.05  # issue 12: throughput and latency within 5% (or better)
SPEND_CONTROL_BUDGET_MS = 0.15  # issue 14: budget and rate-limit checks, Mortar CPU per request
SCENARIO_LABELS = {
    "json-32": "Non-streaming, 32 conns",
    "stream-32": "20-chunk streams, 32 conns",
    "slow-1000": "1,000 slow streams",
    "json-1": "One connection, non-streaming",
    "stream-1": "One connection, stream",
}


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    unit: str
    scenario: str
    read: Callable[[dict[str, Any]], float | None]
    higher_is_better: bool
    compare: str  # against direct and LiteLLM: "ratio" or "added"
    after_vs_before: str = "ratio"  # "added" for counts that are zero when all is well


def _g(*path: str) -> Callable[[dict[str, Any]], float | None]:
    def read(result: dict[str, Any]) -> float | None:
        value: Any = result
        for part in path:
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        return None if value is None else float(value)

    return read


METRICS = [
    Metric("json_rps", "Non-streaming, 32 conns", "req/s", "json-32", _g("rps"), True, "ratio"),
    Metric("json_p50", "  latency p50", "ms", "json-32", _g("latency_p50_ms"), False, "ratio"),
    Metric(
        "stream_rps",
        "20-chunk streams, 32 conns",
        "streams/s",
        "stream-32",
        _g("rps"),
        True,
        "ratio",
    ),
    Metric(
        "stream_p50",
        "  stream latency p50",
        "ms",
        "stream-32",
        _g("latency_p50_ms"),
        False,
        "ratio",
    ),
    Metric(
        "slow_gap_p50",
        "1,000 slow streams: token gap p50",
        "ms",
        "slow-1000",
        _g("token_gap", "p50_ms"),
        False,
        "added",
    ),
    Metric(
        "slow_gap_p99",
        "  token gap p99",
        "ms",
        "slow-1000",
        _g("token_gap", "p99_ms"),
        False,
        "added",
    ),
    Metric(
        "slow_gap_max",
        "  token gap max",
        "ms",
        "slow-1000",
        _g("token_gap", "max_ms"),
        False,
        "added",
    ),
    Metric(
        "slow_ttft_p50",
        "  time to first token p50",
        "ms",
        "slow-1000",
        _g("ttft", "p50_ms"),
        False,
        "added",
    ),
    Metric(
        "slow_streams",
        "  streams completed whole (of 1,000)",
        "",
        "slow-1000",
        _g("completed"),
        True,
        "ratio",
    ),
    Metric(
        "slow_stalled",
        "  streams stalled (gap > 1 s)",
        "",
        "slow-1000",
        _g("stalled"),
        False,
        "added",
        "added",
    ),
    Metric(
        "slow_failed",
        "  streams failed or unfinished",
        "",
        "slow-1000",
        lambda r: float(r.get("failed", 0) + r.get("unfinished", 0)),
        False,
        "added",
        "added",
    ),
    Metric(
        "one_json_p50",
        "One connection, non-streaming p50",
        "ms",
        "json-1",
        _g("total", "p50_ms"),
        False,
        "added",
    ),
    Metric("one_json_p99", "  p99", "ms", "json-1", _g("total", "p99_ms"), False, "added"),
    Metric(
        "one_stream_ttft",
        "One connection, stream: first token p50",
        "ms",
        "stream-1",
        _g("first", "p50_ms"),
        False,
        "added",
    ),
    Metric(
        "one_stream_p50",
        "  whole 20-chunk stream p50",
        "ms",
        "stream-1",
        _g("total", "p50_ms"),
        False,
        "added",
    ),
    Metric(
        "one_stream_p99",
        "  whole stream p99",
        "ms",
        "stream-1",
        _g("total", "p99_ms"),
        False,
        "added",
    ),
]


def target_names(runs: list[dict[str, Any]]) -> list[str]:
    """The targets measured, in the table's order."""
    return ordered([run["target"] for run in runs])


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """metric key -> target -> the median over rounds."""
    table: dict[str, dict[str, float | None]] = {}
    for metric in METRICS:
        table[metric.key] = {}
        for target in target_names(runs):
            values = [
                v
                for run in runs
                if run["scenario"] == metric.scenario and run["target"] == target
                for v in [metric.read(run["result"])]
                if v is not None
            ]
            table[metric.key][target] = statistics.median(values) if values else None
    return table


def cpu_table(runs: list[dict[str, Any]]) -> list[tuple[str, dict[str, float | None]]]:
    """Per scenario: each gateway's CPU per request on the servers' core (median over rounds)."""
    gateways = [name for name in target_names(runs) if target_kind(name) != "direct"]
    rows = []
    for scenario in ("json-32", "stream-32", "json-1", "stream-1"):
        values = {}
        for target in gateways:
            found = [
                run["result"]["per_request"][f"{target_kind(target)}_cpu_ms"]
                for run in runs
                if run["scenario"] == scenario
                and run["target"] == target
                and "per_request" in run["result"]
            ]
            values[target] = statistics.median(found) if found else None
        rows.append((scenario, values))
    return rows


def mortar_per_request(runs: list[dict[str, Any]], target: str = "mortar") -> dict[str, Any]:
    """What one request costs a Mortar beyond its own CPU: Postgres, Redis (median over rounds)."""
    out: dict[str, Any] = {}
    for scenario in ("json-32", "stream-32"):
        found = [
            run["result"]["per_request"]
            for run in runs
            if run["target"] == target
            and run["scenario"] == scenario
            and "per_request" in run["result"]
        ]
        if not found:
            continue
        merged: dict[str, Any] = {}
        for key in (
            "mortar_cpu_ms",
            "postgres_cpu_ms",
            "redis_cpu_ms",
            "pg_sessions",
            "pg_rows_inserted",
        ):
            merged[key] = statistics.median(f[key] for f in found)
        commands: dict[str, list[float]] = {}
        for f in found:
            for name, value in f["redis_commands"].items():
                commands.setdefault(name, []).append(value)
        merged["redis_commands"] = {k: statistics.median(v) for k, v in sorted(commands.items())}
        out[scenario] = merged
    return out


def targets_check(
    table: dict[str, dict[str, float | None]], runs: list[dict[str, Any]]
) -> list[tuple[str, str, str]]:
    """Issue 8's targets for the working tree's Mortar: verdict and what was measured."""

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
    before or better (issue 12)."""
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
    """Issue 14: what the budget and rate-limit checks add to a request — Mortar's CPU (the
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


def scaling(
    runs: list[dict[str, Any]], one: str = "mortar", two: str = TWO_WORKERS
) -> list[dict[str, Any]]:
    """Issue 17: per throughput scenario, Mortar's one worker against two in the same run —
    throughput, CPU per request, and the cores Mortar and everything else used (medians over
    rounds; the throughput ratio also per round)."""
    rows = []
    for scenario in SCALING_SCENARIOS:
        by_target: dict[str, dict[int, dict[str, Any]]] = {one: {}, two: {}}
        for run in runs:
            if run["scenario"] == scenario and run["target"] in by_target:
                by_target[run["target"]][run["round"]] = run["result"]
        if not by_target[one] or not by_target[two]:
            continue
        sides = {name: _scaling_side(name, results) for name, results in by_target.items()}
        rounds = sorted(set(by_target[one]) & set(by_target[two]))
        rows.append(
            {
                "scenario": scenario,
                "one": sides[one],
                "two": sides[two],
                "ratio": sides[two]["rps"] / sides[one]["rps"] if sides[one]["rps"] else None,
                "round_ratios": [
                    round(by_target[two][r]["rps"] / by_target[one][r]["rps"], 2)
                    for r in rounds
                    if by_target[one][r]["rps"]
                ],
            }
        )
    return rows


def _scaling_side(target: str, results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One side of the scaling table: a target's medians over its rounds."""

    def median(read: Callable[[dict[str, Any]], float | None]) -> float | None:
        values = [v for result in results.values() for v in [read(result)] if v is not None]
        return statistics.median(values) if values else None

    def others(result: dict[str, Any]) -> float:
        # The mock, Postgres and Redis (the other gateways idle), and the load generators.
        cpu = result["cpu_s"]
        shared = cpu["mock"] + cpu["postgres"] + cpu["redis"] + result["loadgen_cpu_s"]
        return float(shared / result["wall_s"])

    def busiest_process(result: dict[str, Any]) -> float | None:
        split = result.get("process_cpu_s")
        return round(split[0] / sum(split), 2) if split and sum(split) else None

    return {
        "rps": median(_g("rps")),
        "mortar_cpu_ms": median(_g("per_request", "mortar_cpu_ms")),
        "mortar_cores": median(lambda r: r["cpu_s"][target] / r["wall_s"]),
        "other_cores": median(others),
        "machine_cores": median(lambda r: sum(r["cores_busy"].values())),
        # What neither the servers, Postgres, Redis nor the load explain: others on the machine.
        "unexplained_cores": median(lambda r: max(r["unexplained_cpu_s"], 0) / r["wall_s"]),
        # Per round, not a median: one round where a worker served every connection matters.
        "busiest_worker_shares": [
            share
            for _, result in sorted(results.items())
            for share in [busiest_process(result)]
            if share is not None
        ],
    }


def per_core(runs: list[dict[str, Any]], target: str = "mortar") -> dict[str, float]:
    """What one core of a Mortar's own CPU serves, from its CPU in each scenario (medians over
    rounds): requests/s, 20-chunk streams/s, and slow streams at once (a chunk every
    SLOW_DELAY_MS; from its CPU per chunk relayed, ramp and drain included)."""
    out: dict[str, float] = {}
    for scenario, key in (("json-32", "json_rps"), ("stream-32", "stream_rps")):
        found = [
            1000 / run["result"]["per_request"]["mortar_cpu_ms"]
            for run in runs
            if run["target"] == target
            and run["scenario"] == scenario
            and run["result"].get("per_request", {}).get("mortar_cpu_ms")
        ]
        if found:
            out[key] = statistics.median(found)
    chunk_us = []
    for run in runs:
        if run["target"] != target or run["scenario"] != "slow-1000":
            continue
        result = run["result"]
        # Every token received: the first of each stream, then one per gap.
        chunks = result["ttft"]["n"] + result["token_gap"]["n"]
        if chunks and result["cpu_s"].get(target):
            chunk_us.append(result["cpu_s"][target] * 1e6 / chunks)
    if chunk_us:
        out["slow_chunk_us"] = statistics.median(chunk_us)
        out["slow_streams"] = 1e6 / out["slow_chunk_us"] * SLOW_DELAY_MS / 1000
    return out
