"""The report's sections beyond the main table: Messages beside chat completions, and beyond
one core."""

from __future__ import annotations

from typing import Any

from .constants import SLOW_DELAY_MS
from .markdown import compare, fmt, join_and, label, table_row
from .metrics import SCENARIO_LABELS
from .mortar import TWO_WORKERS
from .scenarios import MESSAGES_TWINS
from .verdicts import MESSAGES_TOLERANCE


def messages_section(rows: list[dict[str, Any]]) -> list[str]:
    """Each target's Messages throughput beside its chat completions', and the verdict."""
    if not rows:
        return []
    lines = [
        "",
        f"## Messages beside chat completions (within {MESSAGES_TOLERANCE:.0%} of their "
        "throughput, or better)",
        "",
        "`POST /v1/messages` with Anthropic's body and headers (`x-api-key`, "
        "`anthropic-version`), the same model, prompt and 20-token reply as chat completions: "
        "Mortar translates the message to a chat request for the mock and the reply back. "
        "Medians over rounds; the ratio of each round in brackets.",
        "",
        table_row(
            ["Target", "Measure", "Chat completions", "Messages", "Messages / chat", "Verdict"]
        ),
        table_row(["---", "---", "---:", "---:", "---:", "---"]),
    ]
    for found in rows:
        chat = MESSAGES_TWINS[found["scenario"]]
        unit = "req/s" if chat.startswith("json") else "streams/s"
        rounds = ", ".join(f"{ratio:.2f}" for ratio in found["round_ratios"])
        ratio = compare("ratio", found["messages"], found["chat"])
        lines.append(
            table_row(
                [
                    label(found["target"]),
                    f"{SCENARIO_LABELS[chat]}, {unit}",
                    fmt(found["chat"]),
                    fmt(found["messages"]),
                    ratio + (f" ({rounds})" if len(found["round_ratios"]) > 1 else ""),
                    found["verdict"],
                ]
            )
        )
    return lines


def scaling_section(rows: list[dict[str, Any]], per_core: dict[str, float]) -> list[str]:
    """What one core of Mortar's own CPU serves, and Mortar's one worker
    against two, per throughput scenario."""
    lines = ["", "## Beyond one core"]
    served = []
    if "json_rps" in per_core:
        served.append(f"{per_core['json_rps']:,.0f} non-streaming requests/s")
    if "stream_rps" in per_core:
        served.append(f"{per_core['stream_rps']:,.0f} 20-chunk streams/s")
    if "slow_streams" in per_core:
        served.append(
            f"{per_core['slow_streams']:,.0f} slow streams at once (a chunk every "
            f"{SLOW_DELAY_MS} ms; {per_core['slow_chunk_us']:.0f} µs of CPU per chunk relayed, "
            "the streams' opening and records included, at 1,000 streams)"
        )
    if served:
        lines += [
            "",
            f"Per core of Mortar's own CPU (its one worker's CPU per request, median over "
            f"rounds; Postgres and Redis not counted): {join_and(served)}.",
        ]
    if not rows:
        return lines
    lines += [
        "",
        f"{label(TWO_WORKERS)} is the working tree's Mortar, everything on as for Mortar, served "
        "by `uvicorn --workers 2` with its own database and Redis prefix, and not pinned to one "
        "core: its two workers run on both cores (`taskset -c 0,1`). **The mock model server "
        "and the load generators share those cores with it** (they stay on core 1: this machine "
        "has no other), and so do Postgres and Redis. The ratio is what a second worker adds on "
        "a machine its own load already keeps busy, not what a second dedicated core would "
        "give; what one core of Mortar's own serves is 1,000 / its CPU per request (the "
        "“per core” rows). Medians over rounds; the throughput ratio of each round in brackets.",
        "",
        table_row(["Measure", "Mortar, 1 worker (core 0)", f"{label(TWO_WORKERS)} (cores 0-1)",
              "2 workers / 1"]),
        table_row(["---", "---:", "---:", "---:"]),
    ]  # fmt: skip
    for row in rows:
        one, two = row["one"], row["two"]
        unit = "req/s" if row["scenario"].startswith("json") else "streams/s"
        rounds = ", ".join(f"{ratio:.2f}" for ratio in row["round_ratios"])
        ratio = compare("ratio", two["rps"], one["rps"])
        lines.append(
            table_row(
                [
                    f"{SCENARIO_LABELS[row['scenario']]}, {unit}",
                    fmt(one["rps"]),
                    fmt(two["rps"]),
                    ratio + (f" ({rounds})" if len(row["round_ratios"]) > 1 else ""),
                ]
            )
        )
        served_per_core = [
            1000 / side["mortar_cpu_ms"] if side["mortar_cpu_ms"] else None for side in (one, two)
        ]
        sub_rows: tuple[tuple[str, list[float | None], str], ...] = (
            ("  Mortar CPU per request, ms", [one["mortar_cpu_ms"], two["mortar_cpu_ms"]], "ratio"),
            (f"  per core of Mortar's CPU, {unit}", served_per_core, "ratio"),
            ("  cores used by Mortar", [one["mortar_cores"], two["mortar_cores"]], "added"),
            (
                "  cores used by the mock, load generators, Postgres and Redis",
                [one["other_cores"], two["other_cores"]],
                "added",
            ),
            (
                "  cores busy, of 2 (anything)",
                [one["machine_cores"], two["machine_cores"]],
                "added",
            ),
            (
                "  of which other processes (not this run's)",
                [one.get("unexplained_cores"), two.get("unexplained_cores")],
                "added",
            ),
        )
        for title, values, how in sub_rows:
            lines.append(
                table_row(
                    [title, fmt(values[0]), fmt(values[1]), compare(how, values[1], values[0])]
                )
            )
    shares = [
        f"{SCENARIO_LABELS[row['scenario']].lower()} "
        + ", ".join(f"{share:.0%}" for share in row["two"]["busiest_worker_shares"])
        for row in rows
        if row["two"].get("busiest_worker_shares")
    ]
    if shares:
        lines += [
            "",
            "The busier worker's share of the two workers' CPU, per round (each connection is "
            "served by the worker that accepted it, and wrk keeps its connections for the whole "
            f"measurement; 50% is an even split): {'; '.join(shares)}.",
        ]
    return lines
