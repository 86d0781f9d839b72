"""From raw measurements to the report's table: what each row reads from a measurement, and its
median over rounds per target; CPU per request."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .targets import ordered, target_kind

TIMES = "\u00d7"  # the multiplication sign of ratios
SCENARIO_LABELS = {
    "json-32": "Non-streaming, 32 conns",
    "stream-32": "20-chunk streams, 32 conns",
    "messages-json-32": "Messages, non-streaming, 32 conns",
    "messages-stream-32": "Messages, 20-chunk streams, 32 conns",
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


def read_path(*path: str) -> Callable[[dict[str, Any]], float | None]:
    """A reader of the number at `path` in a measurement's result; None where there is none."""

    def read(result: dict[str, Any]) -> float | None:
        value: Any = result
        for part in path:
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        return None if value is None else float(value)

    return read


RPS = read_path("rps")
LATENCY_P50 = read_path("latency_p50_ms")
GAP, TTFT, TOTAL, FIRST = "token_gap", "ttft", "total", "first"

# The table's rows, in order: (key, title, unit, scenario, read, higher is better, compared with
# direct and LiteLLM as a "ratio" or the "added" difference[, after vs before likewise]).
METRICS = [
    Metric("json_rps", "Non-streaming, 32 conns", "req/s", "json-32", RPS, True, "ratio"),
    Metric("json_p50", "  latency p50", "ms", "json-32", LATENCY_P50, False, "ratio"),
    Metric("stream_rps", "20-chunk streams, 32 conns", "streams/s", "stream-32", RPS, True,
           "ratio"),
    Metric("stream_p50", "  stream latency p50", "ms", "stream-32", LATENCY_P50, False, "ratio"),
    Metric("messages_json_rps", "Messages, non-streaming, 32 conns", "req/s", "messages-json-32",
           RPS, True, "ratio"),
    Metric("messages_json_p50", "  latency p50", "ms", "messages-json-32", LATENCY_P50, False,
           "ratio"),
    Metric("messages_stream_rps", "Messages, 20-chunk streams, 32 conns", "streams/s",
           "messages-stream-32", RPS, True, "ratio"),
    Metric("messages_stream_p50", "  stream latency p50", "ms", "messages-stream-32",
           LATENCY_P50, False, "ratio"),
    Metric("slow_gap_p50", "1,000 slow streams: token gap p50", "ms", "slow-1000",
           read_path(GAP, "p50_ms"), False, "added"),
    Metric("slow_gap_p99", "  token gap p99", "ms", "slow-1000", read_path(GAP, "p99_ms"), False,
           "added"),
    Metric("slow_gap_max", "  token gap max", "ms", "slow-1000", read_path(GAP, "max_ms"), False,
           "added"),
    Metric("slow_ttft_p50", "  time to first token p50", "ms", "slow-1000",
           read_path(TTFT, "p50_ms"), False, "added"),
    Metric("slow_streams", "  streams completed whole (of 1,000)", "", "slow-1000",
           read_path("completed"), True, "ratio"),
    Metric("slow_stalled", "  streams stalled (gap > 1 s)", "", "slow-1000",
           read_path("stalled"), False, "added", "added"),
    Metric("slow_failed", "  streams failed or unfinished", "", "slow-1000",
           lambda r: float(r.get("failed", 0) + r.get("unfinished", 0)), False, "added", "added"),
    Metric("one_json_p50", "One connection, non-streaming p50", "ms", "json-1",
           read_path(TOTAL, "p50_ms"), False, "added"),
    Metric("one_json_p99", "  p99", "ms", "json-1", read_path(TOTAL, "p99_ms"), False, "added"),
    Metric("one_stream_ttft", "One connection, stream: first token p50", "ms", "stream-1",
           read_path(FIRST, "p50_ms"), False, "added"),
    Metric("one_stream_p50", "  whole 20-chunk stream p50", "ms", "stream-1",
           read_path(TOTAL, "p50_ms"), False, "added"),
    Metric("one_stream_p99", "  whole stream p99", "ms", "stream-1", read_path(TOTAL, "p99_ms"),
           False, "added"),
]  # fmt: skip


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


# The scenarios whose CPU per request the report shows (the slow streams have none: they are
# counted in the window only, their CPU is the ramp's and the drain's too).
PER_REQUEST_SCENARIOS = (
    "json-32",
    "messages-json-32",
    "stream-32",
    "messages-stream-32",
    "json-1",
    "stream-1",
)


def cpu_table(runs: list[dict[str, Any]]) -> list[tuple[str, dict[str, float | None]]]:
    """Per scenario measured: each gateway's CPU per request on the servers' core (median over
    rounds)."""
    gateways = [name for name in target_names(runs) if target_kind(name) != "direct"]
    measured = {run["scenario"] for run in runs}
    rows = []
    for scenario in (s for s in PER_REQUEST_SCENARIOS if s in measured):
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
    for scenario in ("json-32", "messages-json-32", "stream-32", "messages-stream-32"):
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
