"""The command line: parse the flags, start everything, run the interleaved rounds, write the
report, and stop everything again whatever happens."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.commands import program

from .baseline import Baseline, baseline_checked_out
from .checks import check_target
from .constants import (
    BENCH_DB,
    LOAD_CORE,
    LOGS,
    MORTAR_ACCESS_LOG,
    RESULTS,
    SLOW_DELAY_MS,
    SLOW_RAMP_S,
)
from .cpu import wait_for_quiet_machine
from .litellm import ensure_litellm
from .load import run_wrk
from .measurement import measure, wait_quiet
from .metrics import cpu_table, medians, mortar_per_request, target_names
from .mortar import TWO_WORKERS, UNMETERED, mortar_sources
from .processes import Processes
from .profiling import profile_mortar
from .report import machine_info, render
from .scaling import per_core, scaling
from .scenarios import SCENARIOS, Scenario
from .stores import admin_database_url, clean_redis, drop_database, recorded_counts, redis_url
from .targets import Bench, start_everything
from .verdicts import (
    before_after_check,
    messages_check,
    spend_control_check,
    targets_check,
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=program(__name__),
        description="Benchmark Mortar beside LiteLLM and the mock model server (make bench).",
        epilog="`python -m bench --help` lists the other benchmarks.",
    )
    parser.add_argument("--quick", action="store_true", help="one short round (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    names = [s.name for s in SCENARIOS]
    parser.add_argument(
        "--scenarios",
        default=",".join(names),
        help=f"the scenarios to measure, comma-separated (default: all of {', '.join(names)})",
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also measure Mortar at this git revision (target mortar@<commit>), interleaved "
        "with the working tree's, and compare after (the working tree) with before (REF)",
    )
    parser.add_argument(
        "--no-litellm",
        dest="litellm",
        action="store_false",
        help="leave LiteLLM out (a shorter before/after run)",
    )
    parser.add_argument(
        "--no-unmetered",
        dest="unmetered",
        action="store_false",
        help=f"leave out {UNMETERED} (the working tree, its model priced, without budgets or "
        "rate limits, beside which the report prices the spend-control checks; never with "
        "--baseline)",
    )
    parser.add_argument(
        "--no-scaling",
        dest="scaling",
        action="store_false",
        help=f"leave out {TWO_WORKERS} (the working tree served by two worker processes on "
        "both cores, measured on json-32 and stream-32 beside Mortar's one worker: the report's "
        "“Beyond one core”; about two minutes of a default run)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also record py-spy profiles of Mortar (bench/results/profile-*)",
    )
    parser.add_argument("--profile-only", action="store_true", help="profiles, no table")
    parser.add_argument(
        "--keep-db", action="store_true", help=f"keep {BENCH_DB} (and a baseline's) afterwards"
    )
    parser.add_argument(
        "--render", type=Path, help="only re-render a results JSON into bench/results/latest.md"
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=300.0,
        help="seconds to wait at most for other load on the machine to stop",
    )
    args = parser.parse_args(argv)
    unknown = set(args.scenarios.split(",")) - set(names)
    if unknown:
        parser.error(f"no scenario {', '.join(sorted(unknown))}; there are {', '.join(names)}")
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.render:
        report = summarize(json.loads(args.render.read_text()))
        (RESULTS / "latest.md").write_text(render(report))
        print(render(report))
        return
    if args.quick:
        args.rounds, args.duration = 1, 4.0
    # Slow streams last the ramp plus one measurement, so all of them overlap for its length.
    slow_chunks = int((SLOW_RAMP_S + args.duration) * 1000 / SLOW_DELAY_MS)
    scenarios = [
        dataclasses.replace(s, chunks=slow_chunks) if s.kind == "slow" else s
        for s in SCENARIOS
        if s.name in args.scenarios.split(",")
    ]

    ensure_tools()
    if args.litellm:
        ensure_litellm()
    os.sched_setaffinity(0, {int(LOAD_CORE)})  # this script stays off the servers' core
    RESULTS.mkdir(exist_ok=True)
    LOGS.mkdir(exist_ok=True)
    # A plain `kill` should clean up like Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)

    background = wait_for_quiet_machine(args.wait_quiet)
    machine = machine_info(litellm=args.litellm)  # now: the code under test is what is checked out
    processes = Processes()
    admin_url = admin_database_url()
    started_at = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="mortar-bench-") as tmp,
        _baseline(args.baseline, Path(tmp)) as baseline,
    ):
        mortars = mortar_sources(baseline, unmetered=args.unmetered, two_workers=args.scaling)
        try:
            bench = start_everything(processes, Path(tmp), mortars=mortars, litellm=args.litellm)
            for target in bench.targets.values():
                check_target(target)
            print(f"All {len(bench.targets)} targets answer correctly; warming up …", flush=True)
            for target in bench.targets.values():
                for scenario in scenarios:
                    if scenario.kind == "wrk" and target.measured_on(scenario):
                        run_wrk(target, scenario, bench.tmp, 2)
            if not args.profile_only:
                runs = measure_rounds(bench, scenarios, args.rounds, args.duration)
                wait_quiet(bench)
                report = {
                    "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "quick": args.quick,
                    "rounds": args.rounds,
                    "duration_s": args.duration,
                    "argv": argv,
                    "machine": machine,
                    "baseline": _baseline_info(baseline),
                    "background_cores_before": background[-1],
                    "mortar_access_log": MORTAR_ACCESS_LOG,
                    "scenarios": [s.__dict__ for s in scenarios],
                    "runs": runs,
                    "elapsed_s": round(time.monotonic() - started_at, 1),
                }
                for target in bench.mortars():
                    assert target.mortar is not None
                    key = {
                        "mortar": "recorded",
                        UNMETERED: "recorded_unmetered",
                        TWO_WORKERS: "recorded_two_workers",
                    }.get(target.name, "recorded_baseline")
                    report[key] = recorded_counts(target.mortar.database_url)
                print("\n" + write_report(summarize(report)))
            if args.profile or args.profile_only:
                profile_mortar(bench, scenarios, 10.0 if not args.quick else 5.0)
        finally:
            processes.stop_all()
            for mortar in mortars:
                with contextlib.suppress(Exception):
                    clean_redis(redis_url(), mortar.redis_prefix)
                if not args.keep_db:
                    with contextlib.suppress(Exception):
                        drop_database(admin_url, mortar.database)
    print(f"Done in {time.monotonic() - started_at:.0f} s.", flush=True)


def measure_rounds(
    bench: Bench, scenarios: list[Scenario], rounds: int, duration: float
) -> list[dict[str, Any]]:
    """Every scenario on every target, round after round, the targets' order rotating."""
    runs: list[dict[str, Any]] = []
    width = max(8, *(len(name) for name in bench.targets))
    scenario_width = max(len(scenario.name) for scenario in scenarios)
    for index, order in rounds_of(list(bench.targets), rounds):
        for scenario in scenarios:
            for name in order:
                if not bench.targets[name].measured_on(scenario):
                    continue
                result = measure(bench, bench.targets[name], scenario, duration)
                runs.append(
                    {"round": index, "scenario": scenario.name, "target": name, "result": result}
                )
                print(
                    f"round {index + 1} {scenario.name:<{scenario_width}} {name:<{width}} "
                    f"{headline(result, list(bench.targets))}",
                    flush=True,
                )
    return runs


def write_report(report: dict[str, Any]) -> str:
    """Write latest.md, latest.json and a stamped copy of the JSON; return the markdown."""
    text = render(report)
    (RESULTS / "latest.md").write_text(text)
    raw = json.dumps(report, indent=1, default=str)
    (RESULTS / "latest.json").write_text(raw)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"run-{stamp}.json").write_text(raw)
    return text


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """Everything the report derives from its raw runs (also for re-rendering an old one)."""
    runs = report["runs"]
    report["target_names"] = target_names(runs)
    report["medians"] = medians(runs)
    report["cpu_per_request"] = cpu_table(runs)
    report["mortar_per_request"] = mortar_per_request(runs)
    report["targets"] = targets_check(report["medians"], runs)
    report["messages"] = messages_check(runs)
    baseline = report.get("baseline")
    if baseline:
        report["baseline_per_request"] = mortar_per_request(runs, baseline["target"])
        report["before_after"] = before_after_check(report["medians"], baseline["target"])
    if UNMETERED in report["target_names"]:
        report["unmetered_per_request"] = mortar_per_request(runs, UNMETERED)
        report["spend_control"] = spend_control_check(
            report["mortar_per_request"], report["unmetered_per_request"]
        )
    report["scaling"] = scaling(runs)
    report["per_core"] = per_core(runs)
    report["unexplained_cores"] = statistics.median(
        [run["result"]["unexplained_cpu_s"] / run["result"]["wall_s"] for run in runs] or [0.0]
    )
    return report


def ensure_tools() -> None:
    missing = [tool for tool in ("wrk", "taskset") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"missing {', '.join(missing)}: install with `apt-get install wrk util-linux`"
        )
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("the benchmark pins servers and load to two different cores: need 2")


def rounds_of(targets: list[str], rounds: int) -> Iterator[tuple[int, list[str]]]:
    """Each round rotates the order, so no target always follows the same one."""
    for index in range(rounds):
        shift = index % len(targets)
        yield index, targets[shift:] + targets[:shift]


@contextlib.contextmanager
def _baseline(ref: str | None, parent: Path) -> Iterator[Baseline | None]:
    if ref is None:
        yield None
        return
    with baseline_checked_out(ref, parent) as baseline:
        print(f"Baseline {baseline.target_name}: {baseline.subject}", flush=True)
        yield baseline


def _baseline_info(baseline: Baseline | None) -> dict[str, str] | None:
    if baseline is None:
        return None
    return {
        "ref": baseline.ref,
        "commit": baseline.commit,
        "short": baseline.short,
        "subject": baseline.subject,
        "target": baseline.target_name,
    }


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def headline(result: dict[str, Any], targets: list[str]) -> str:
    """One line for the console: the measurement's numbers and the servers' CPU."""
    if "rps" in result:
        text = f"{result['rps']:>9,.1f} req/s  p50 {result['latency_p50_ms']:.2f} ms"
        failed = result["failed"]
    elif result.get("mode") == "slow":
        gap = result["token_gap"]
        text = (
            f"{result['streams_per_s']:>8,.1f} streams/s  gap p50 {gap['p50_ms']} "
            f"p99 {gap['p99_ms']} max {gap['max_ms']} ms  stalled {result['stalled']}"
        )
        failed = result["failed"] + result["unfinished"]
    else:
        text = (
            f"{result['requests_per_s']:>8,.1f} req/s  first p50 {result['first']['p50_ms']} "
            f"ms  total p50 {result['total']['p50_ms']} ms  p99 {result['total']['p99_ms']} ms"
        )
        failed = result["failed"]
    cpu = result["cpu_s"]
    servers = " ".join(f"{name} {cpu[name]}" for name in targets if name in cpu)
    text += f"  [cpu {servers} core1 {result['core1_busy']}]"
    calls = result.get("system_calls")
    if calls:
        text += f"  [syscalls r {calls['reads']} w {calls['writes']}]"
    if result.get("writer_spilled"):
        text += f"  [run writer spilled {result['writer_spilled']:,} rows]"
    return text + (f"  FAILED {failed}" if failed else "")
