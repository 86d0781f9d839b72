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

from .constants import LITELLM_VENV, PYTHON, ROOT
from .markdown import compare, fmt, join_and, label, table_row
from .metrics import METRICS, TIMES, target_names
from .mortar import TWO_WORKERS, UNMETERED
from .sections import messages_section, scaling_section


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
        f"{join_and(gateways)}: one worker{' each' if len(gateways) > 1 else ''}, pinned to core 0 "
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
    lines += [table_row(header), table_row(["---", "---"] + ["---:"] * (len(header) - 2))]
    measured = {run["scenario"] for run in report["runs"]}
    for metric in (m for m in METRICS if m.scenario in measured):
        row = table[metric.key]
        mortar = row.get("mortar")
        cells = [metric.title, metric.unit, *(fmt(row.get(name)) for name in names)]
        cells.append(compare(metric.compare, mortar, row.get("direct")))
        if litellm:
            cells.append(compare(metric.compare, mortar, row.get("litellm")))
        if before:
            cells.append(compare(metric.after_vs_before, mortar, row.get(before)))
        lines.append(table_row(cells))
    lines += [
        "",
        "CPU per request on core 0 (the gateway process, all its threads; median over rounds):",
        "",
        table_row(["Scenario", *(f"{name} ms" for name in gateways)]),
        table_row(["---"] + ["---:"] * len(gateways)),
    ]
    for scenario, values in report["cpu_per_request"]:
        cells = [fmt(values.get(name)) for name in names if name != "direct"]
        lines.append(table_row([scenario, *cells]))
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
    lines += messages_section(report.get("messages", []))
    if report.get("scaling") or report.get("per_core"):
        lines += scaling_section(report.get("scaling", []), report.get("per_core", {}))
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
        command = " ".join(["-m bench load", *report.get("argv", [])])
        reproduce = f"Reproduce: `.venv/bin/python {command}`."
    else:
        reproduce = (
            "Reproduce: `make bench` (or `.venv/bin/python -m bench load --quick` for one short "
            "round)."
        )
    lines += ["", reproduce + " Raw numbers: bench/results/latest.json.", ""]
    return "\n".join(lines)
