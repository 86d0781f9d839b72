"""The report: the machine it ran on, and the markdown written to bench/results/latest.md."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from .constants import LITELLM_VENV, PYTHON, ROOT, SLOW_DELAY_MS
from .metrics import METRICS, SCENARIO_LABELS, TIMES, target_names
from .mortar import TWO_WORKERS, UNMETERED

NONE = "\u2013"  # an en dash: not measured


def label(name: str) -> str:
    """A target's column title: direct, Mortar, Mortar@<commit>, LiteLLM."""
    kind, at, commit = name.partition("@")
    return {"mortar": "Mortar", "litellm": "LiteLLM"}.get(kind, kind) + at + commit


def machine_info(*, litellm: bool) -> dict[str, Any]:
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError):
        match = re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
        mem_kb = int(match.group(1)) if match else 0

    def version(python: str, package: str) -> str:
        with contextlib.suppress(Exception):
            return subprocess.run(
                [python, "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout.strip()
        return "?"

    git = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "git": git + (" (with uncommitted changes)" if any(dirty) else ""),
        "dirty_files": [line[3:] for line in dirty if line],
        "django": version(PYTHON, "django"),
        "uvicorn": version(PYTHON, "uvicorn"),
        "httpx": version(PYTHON, "httpx"),
        **(
            {"litellm": version(str(LITELLM_VENV / "bin" / "python"), "litellm")} if litellm else {}
        ),
        "wrk": (wrk_version.stdout + wrk_version.stderr).split("\n")[0].strip(),
    }


def _fmt(value: float | None) -> str:
    if value is None:
        return NONE
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _compare(how: str, mortar: float | None, other: float | None) -> str:
    """`how` is "ratio" (mortar / other) or "added" (mortar - other)."""
    if mortar is None or other is None:
        return NONE
    if how == "added":
        return f"{mortar - other:+.2f}" if abs(mortar - other) < 100 else f"{mortar - other:+,.0f}"
    if other == 0:
        return NONE
    return f"{mortar / other:.2f}{TIMES}" if mortar / other < 10 else f"{mortar / other:.1f}{TIMES}"


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _spills(runs: list[dict[str, Any]]) -> list[str]:
    """A line for each gateway whose run writer fell so far behind that it spilled to its spool
    (MORTAR_WRITER_SPILL_AT rows queued) during a measurement: what it spilled, and where."""
    spilled: dict[str, list[str]] = {}
    for run in runs:
        rows = run["result"].get("writer_spilled")
        if rows:
            spilled.setdefault(run["target"], []).append(
                f"{run['scenario']} round {run['round'] + 1}: {rows:,}"
            )
    lines: list[str] = []
    for target, where in spilled.items():
        lines += [
            "",
            f"The run writer of {label(target)} fell behind and spilled rows to its spool "
            f"({'; '.join(where)}).",
        ]
    return lines


def render(report: dict[str, Any]) -> str:
    table = report["medians"]
    machine = report["machine"]
    # A two-worker Mortar has its own table ("Beyond one core"), not a column of mostly dashes.
    names = [
        name
        for name in report.get("target_names") or target_names(report["runs"])
        if name != TWO_WORKERS
    ]
    baseline = report.get("baseline")
    before: str | None = baseline["target"] if baseline else None
    litellm = "litellm" in names
    gateways = [label(name) for name in names if name != "direct"]
    lines = [
        "# Mortar benchmark",
        "",
        f"Run {report['finished_at']} — {report['rounds']} round(s) of "
        f"~{report['duration_s']:g} s per measurement, targets interleaved "
        f"({'quick smoke run' if report['quick'] else 'full run'}).",
        "",
        f"Machine: {machine['nproc']} CPUs ({machine['cpu_model']}), "
        f"{machine['memory_gib']} GiB memory, Linux {machine['kernel']}, Python "
        f"{machine['python']}; Mortar {machine['git']} (Django {machine['django']}, uvicorn "
        f"{machine['uvicorn']}), "
        + (f"LiteLLM {machine['litellm']}, " if litellm else "")
        + f"{machine['wrk']}.",
        "",
    ]
    if baseline and before:
        lines += [
            f"{label(before)} is Mortar at {baseline['commit'][:12]} (“{baseline['subject']}”), "
            "checked out into a temporary git worktree and run from the same venv, started "
            "exactly as the working tree's Mortar, with its own database and Redis prefix. "
            f"“After vs before” compares Mortar (the working tree) with {label(before)}.",
            "",
        ]
    if UNMETERED in names:
        lines += [
            f"{label(UNMETERED)} is the working tree's Mortar without budgets or rate limits "
            "(its model priced alike; see “Spend control” below); the comparisons are Mortar's.",
            "",
        ]
    lines += [
        f"{_and(gateways)}: one worker{' each' if len(gateways) > 1 else ''}, pinned to core 0 "
        "(`taskset -c 0`). The mock model "
        "server, wrk and the asyncio load client: core 1. Postgres and Redis are not pinned. "
        "Mortar runs with everything on: auth, validation, token counting, optimizer in shadow "
        "mode, budgets and rate limits on its organization and key (never refusing), every chunk "
        "recorded in Postgres, telemetry events in Redis; uvicorn's access "
        f"log {'on' if report.get('mortar_access_log', True) else 'off'}, as `make serve` ran "
        "it then." + (" LiteLLM as its CLI ships (access log on)." if litellm else ""),
        "",
        f"Other load on the machine when the run started: {report['background_cores_before']:.2f}"
        " cores. CPU time per measurement that neither the servers, Postgres, Redis nor the "
        f"load generators explain: median {report['unexplained_cores']:.2f} cores (kernel "
        "networking, other processes; per measurement in latest.json, `unexplained_cpu_s`).",
        "",
        f"Medians over rounds. Ratios ({TIMES}) compare rates or latencies; signed numbers are "
        "differences (Mortar - other).",
        "",
    ]
    comparisons = ["Mortar vs direct"]
    comparisons += ["Mortar vs LiteLLM"] if litellm else []
    comparisons += ["after vs before"] if before else []
    header = ["Measure", "unit", *(label(name) for name in names), *comparisons]
    lines += [_row(header), _row(["---", "---"] + ["---:"] * (len(header) - 2))]
    for metric in METRICS:
        row = table[metric.key]
        mortar = row.get("mortar")
        cells = [metric.title, metric.unit, *(_fmt(row.get(name)) for name in names)]
        cells.append(_compare(metric.compare, mortar, row.get("direct")))
        if litellm:
            cells.append(_compare(metric.compare, mortar, row.get("litellm")))
        if before:
            cells.append(_compare(metric.after_vs_before, mortar, row.get(before)))
        lines.append(_row(cells))
    lines += [
        "",
        "CPU per request on core 0 (the gateway process, all its threads; median over rounds):",
        "",
        _row(["Scenario", *(f"{name} ms" for name in gateways)]),
        _row(["---"] + ["---:"] * len(gateways)),
    ]
    for scenario, values in report["cpu_per_request"]:
        cells = [_fmt(values.get(name)) for name in names if name != "direct"]
        lines.append(_row([scenario, *cells]))
    per_request = [("Mortar", report.get("mortar_per_request", {}))]
    if before:
        per_request.append((label(before), report.get("baseline_per_request", {})))
    if report.get("unmetered_per_request"):
        per_request.append((label(UNMETERED), report["unmetered_per_request"]))
    for name, values_by_scenario in per_request:
        if values_by_scenario:
            lines += ["", f"{name}, per request (median over rounds):", ""]
            for scenario, values in values_by_scenario.items():
                lines.append(f"- {scenario}: {json.dumps(values)}")
    lines += [
        "",
        "## Targets",
        "",
        "| Target | Verdict | Measured |",
        "| --- | --- | --- |",
    ]
    for name, verdict, detail in report["targets"]:
        lines.append(f"| {name} | {verdict} | {detail} |")
    if before:
        lines += [
            "",
            "## After vs before (throughput and latency within 5%, or better)",
            "",
            f"| Measure | Verdict | Mortar / {label(before)} |",
            "| --- | --- | --- |",
        ]
        for name, verdict, detail in report["before_after"]:
            lines.append(f"| {name} | {verdict} | {detail} |")
    if report.get("spend_control"):
        lines += [
            "",
            "## Spend control (budget and rate-limit checks ≤ 0.15 ms CPU per request)",
            "",
            "Mortar's organization and key each have a budget and request and token rate "
            "limits, too large to refuse anything: every request is checked, held, charged and "
            f"counted. {label(UNMETERED)} is the same working tree without budgets or limits; "
            "both price the model (a priced run's cost is computed and stored with or without "
            "a budget). Per request at 32 connections (median over rounds):",
            "",
            "| Scenario | Verdict | Added by the checks |",
            "| --- | --- | --- |",
        ]
        for name, verdict, detail in report["spend_control"]:
            lines.append(f"| {name} | {verdict} | {detail} |")
    if report.get("scaling") or report.get("per_core"):
        lines += _scaling_section(report.get("scaling", []), report.get("per_core", {}))
    recorded = [("Mortar", report.get("recorded"))]
    if before:
        recorded.append((label(before), report.get("recorded_baseline")))
    if report.get("recorded_unmetered"):
        recorded.append((label(UNMETERED), report["recorded_unmetered"]))
    if report.get("recorded_two_workers"):
        recorded.append((label(TWO_WORKERS), report["recorded_two_workers"]))
    for name, counts in recorded:
        if counts:
            lines += [
                "",
                f"Recorded by {name} during the run: {counts['runs']:,} runs "
                f"({', '.join(f'{k} {v:,}' for k, v in counts['by_status'].items())}), "
                f"{counts['chunks']:,} chunk rows.",
            ]
    lines += _spills(report["runs"])
    if before or not litellm:
        command = " ".join(["bench/run.py", *report.get("argv", [])])
        reproduce = f"Reproduce: `.venv/bin/python {command}`."
    else:
        reproduce = (
            "Reproduce: `make bench` (or `.venv/bin/python bench/run.py --quick` for one short "
            "round)."
        )
    lines += ["", reproduce + " Raw numbers: bench/results/latest.json.", ""]
    return "\n".join(lines)


def _scaling_section(rows: list[dict[str, Any]], per_core: dict[str, float]) -> list[str]:
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
            f"rounds; Postgres and Redis not counted): {_and(served)}.",
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
        _row(["Measure", "Mortar, 1 worker (core 0)", f"{label(TWO_WORKERS)} (cores 0-1)",
              "2 workers / 1"]),
        _row(["---", "---:", "---:", "---:"]),
    ]  # fmt: skip
    for row in rows:
        one, two = row["one"], row["two"]
        unit = "req/s" if row["scenario"].startswith("json") else "streams/s"
        rounds = ", ".join(f"{ratio:.2f}" for ratio in row["round_ratios"])
        ratio = _compare("ratio", two["rps"], one["rps"])
        lines.append(
            _row(
                [
                    f"{SCENARIO_LABELS[row['scenario']]}, {unit}",
                    _fmt(one["rps"]),
                    _fmt(two["rps"]),
                    ratio + (f" ({rounds})" if len(row["round_ratios"]) > 1 else ""),
                ]
            )
        )
        per_core = [
            1000 / side["mortar_cpu_ms"] if side["mortar_cpu_ms"] else None for side in (one, two)
        ]
        for title, values, how in (
            ("  Mortar CPU per request, ms", [one["mortar_cpu_ms"], two["mortar_cpu_ms"]], "ratio"),
            (f"  per core of Mortar's CPU, {unit}", per_core, "ratio"),
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
        ):
            lines.append(
                _row([title, _fmt(values[0]), _fmt(values[1]), _compare(how, values[1], values[0])])
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
