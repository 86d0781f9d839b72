"""The load generators, run from the load core: wrk for throughput, the asyncio client
(bench/harness/loadgen/, as `python -m bench loadgen`) for gaps between chunks and
one-connection latency."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .constants import HARNESS, LOAD_CORE, PYTHON, ROOT, SLOW_RAMP_S
from .scenarios import Scenario, request_body, request_headers
from .targets import Target


def body_file(tmp: Path, target: Target, scenario: Scenario) -> Path:
    """The scenario's request body for this target, written once to a file for the loaders."""
    path = tmp / f"body-{target.name}-{scenario.name}.json"
    if not path.exists():
        path.write_bytes(
            request_body(
                target.model,
                stream=scenario.stream,
                delay_ms=scenario.delay_ms,
                chunks=scenario.chunks,
                surface=scenario.surface,
            )
        )
    return path


def load_command(target: Target, scenario: Scenario, tmp: Path, seconds: float) -> list[str]:
    """The command that loads `target` with `scenario` for `seconds` (run it from ROOT)."""
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
            str(HARNESS / "post.lua"),
            target.url_for(scenario),
        ]
    headers = request_headers(target.auth, scenario.surface)
    return [
        "taskset",
        "-c",
        LOAD_CORE,
        PYTHON,
        "-m",
        "bench",
        "loadgen",
        scenario.kind,
        "--url",
        target.url_for(scenario),
        "--body-file",
        str(body_file(tmp, target, scenario)),
        *(f"--header={name}: {value}" for name, value in headers.items()),
        "--duration",
        f"{seconds:g}",
        "--connections",
        str(scenario.connections),
        "--ramp",
        f"{SLOW_RAMP_S:g}",
        "--tokens",
        str(scenario.chunks),
    ]


def load_env(target: Target, scenario: Scenario, tmp: Path) -> dict[str, str]:
    """The environment of the load: what bench/harness/post.lua reads (the body to POST and the
    headers to send)."""
    headers = request_headers(target.auth, scenario.surface)
    return {
        **os.environ,
        "BENCH_BODY_FILE": str(body_file(tmp, target, scenario)),
        "BENCH_HEADERS": "\n".join(f"{name}: {value}" for name, value in headers.items()),
    }


def run_wrk(target: Target, scenario: Scenario, tmp: Path, duration: float) -> dict[str, Any]:
    command = load_command(target, scenario, tmp, duration)
    env = load_env(target, scenario, tmp)
    result = subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=duration + 60
    )
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
    # A slow stream lasts its chunks at the mock's pace: the measurement is as long as that.
    seconds = scenario.chunks * scenario.delay_ms / 1000 if scenario.kind == "slow" else duration
    result = subprocess.run(
        load_command(target, scenario, tmp, seconds),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=seconds + 120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"loadgen failed:\n{result.stdout}\n{result.stderr}")
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary
