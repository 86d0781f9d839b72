"""Beyond one core: Mortar's one worker against two in the same run, and what one core of
Mortar's own CPU serves."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from .constants import SLOW_DELAY_MS
from .metrics import read_path
from .mortar import SCALING_SCENARIOS, TWO_WORKERS


def scaling(
    runs: list[dict[str, Any]], one: str = "mortar", two: str = TWO_WORKERS
) -> list[dict[str, Any]]:
    """Per throughput scenario, Mortar's one worker against two in the same run —
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
        "rps": median(read_path("rps")),
        "mortar_cpu_ms": median(read_path("per_request", "mortar_cpu_ms")),
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
