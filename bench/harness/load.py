"""The load generators, run from the load core: wrk for throughput, bench/loadgen.py for gaps
between chunks and one-connection latency."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .constants import BENCH, LOAD_CORE, PYTHON, SLOW_RAMP_S
from .scenarios import Scenario, body_file
from .targets import Target


def load_command(target: Target, scenario: Scenario, tmp: Path, seconds: float) -> list[str]:
    """The command that loads `target` with `scenario` for `seconds`."""
    if scenario.kind == "wrk":
        return [
            "taskset",
            "-c",
            LOAD_CORE,
            "wrk",
            "-t1",
            f"-c{scenario.connections}",
            f"-d{seconds:g}s",
            "--timeout",
            "10s",
            "-s",
            str(BENCH / "post.lua"),
            target.url,
        ]
    return [
        "taskset",
        "-c",
        LOAD_CORE,
        PYTHON,
        str(BENCH / "loadgen.py"),
        scenario.kind,
        "--url",
        target.url,
        "--body-file",
        str(body_file(tmp, target, scenario)),
        "--auth",
        target.auth,
        "--duration",
        f"{seconds:g}",
        "--connections",
        str(scenario.connections),
        "--ramp",
        f"{SLOW_RAMP_S:g}",
        "--tokens",
        str(scenario.chunks),
    ]


def wrk_env(target: Target, scenario: Scenario, tmp: Path) -> dict[str, str]:
    """What bench/post.lua reads: the body to POST and the key to send."""
    return {
        **os.environ,
        "BENCH_BODY_FILE": str(body_file(tmp, target, scenario)),
        "BENCH_AUTH": target.auth,
    }


def run_wrk(target: Target, scenario: Scenario, tmp: Path, duration: float) -> dict[str, Any]:
    command = load_command(target, scenario, tmp, duration)
    env = wrk_env(target, scenario, tmp)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=duration + 60)
    line = next((x for x in result.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{result.stdout}\n{result.stderr}")
    raw = json.loads(line.removeprefix("BENCH_JSON "))
    seconds = raw["duration_us"] / 1e6
    errors = raw["errors"]
    return {
        "requests": raw["requests"],
        "seconds": round(seconds, 3),
        "rps": round(raw["requests"] / seconds, 1),
        "errors": errors,
        "failed": sum(errors.values()),
        "latency_p50_ms": raw["latency_us"]["p50"] / 1000,
        "latency_p99_ms": raw["latency_us"]["p99"] / 1000,
        "latency_max_ms": raw["latency_us"]["max"] / 1000,
    }


def run_loadgen(target: Target, scenario: Scenario, tmp: Path, duration: float) -> dict[str, Any]:
    command = [
        "taskset",
        "-c",
        LOAD_CORE,
        PYTHON,
        str(BENCH / "loadgen.py"),
        scenario.kind,
        "--url",
        target.url,
        "--body-file",
        str(body_file(tmp, target, scenario)),
        "--duration",
        f"{duration:g}",
    ]
    if target.auth:
        command += ["--auth", target.auth]
    if scenario.kind == "slow":
        command += [
            "--connections", str(scenario.connections),
            "--ramp", f"{SLOW_RAMP_S:g}",
            "--tokens", str(scenario.chunks),
        ]  # fmt: skip
        command[command.index("--duration") + 1] = f"{scenario.chunks * scenario.delay_ms / 1000:g}"
    result = subprocess.run(command, capture_output=True, text=True, timeout=duration + 120)
    if result.returncode != 0:
        raise RuntimeError(f"loadgen failed:\n{result.stdout}\n{result.stderr}")
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary
