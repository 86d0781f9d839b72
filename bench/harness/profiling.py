"""py-spy profiles of the working tree's Mortar under each scenario's load, and their summary
(bench/results/profile-<scenario>.svg, .txt, and profile-summary.md)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .constants import LOAD_CORE, PYTHON, RESULTS, ROOT
from .load import load_command, load_env
from .measurement import wait_quiet
from .profile_summary import summaries
from .scenarios import Scenario
from .targets import Bench


def profile_mortar(bench: Bench, scenarios: list[Scenario], duration: float) -> None:
    """Record py-spy profiles of Mortar under each scenario it is measured on."""
    py_spy = shutil.which("py-spy") or str(Path(PYTHON).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy is not installed (.venv/bin/pip install py-spy): no profiles", flush=True)
        return
    target = bench.targets["mortar"]
    assert target.server is not None
    started = datetime.now(UTC)
    profiled = [scenario for scenario in scenarios if target.measured_on(scenario)]
    for scenario in profiled:
        name = scenario.name
        for fmt, suffix in (("raw", "txt"), ("flamegraph", "svg")):
            wait_quiet(bench)
            output = RESULTS / f"profile-{name}.{suffix}"
            print(f"  profiling mortar {name} ({fmt}) → {output.relative_to(ROOT)}", flush=True)
            load_seconds = duration + 6
            load = subprocess.Popen(
                load_command(target, scenario, bench.tmp, load_seconds),
                env=load_env(target, scenario, bench.tmp),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                time.sleep(4 if scenario.kind == "slow" else 2)  # past the ramp
                threads = _distinct_threads(target.server.pid, seconds=2.0)
                subprocess.run(
                    [
                        "taskset",
                        "-c",
                        LOAD_CORE,
                        py_spy,
                        "record",
                        "--pid",
                        str(target.server.pid),
                        "--duration",
                        f"{duration:g}",
                        "--rate",
                        "100",
                        "--format",
                        fmt,
                        "--output",
                        str(output),
                    ],
                    capture_output=True,
                    timeout=duration + 60,
                    check=False,
                )
                if fmt == "raw":
                    (RESULTS / f"profile-{name}.threads.json").write_text(json.dumps(threads))
            finally:
                if load.poll() is None:
                    os.killpg(load.pid, signal.SIGTERM)
                try:
                    load.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(load.pid, signal.SIGKILL)
                    load.wait(timeout=10)
    raw = [RESULTS / f"profile-{scenario.name}.txt" for scenario in profiled]
    write_summary([path for path in raw if path.exists()], started, duration)


def write_summary(paths: list[Path], started: datetime, duration: float) -> None:
    """bench/results/profile-summary.md: where each profile's time goes, and how it was taken."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    command = shlex.join(["python", *sys.orig_argv[1:]])
    header = (
        f"Recorded {started:%Y-%m-%d %H:%M} UTC at {commit} (`{command}`; py-spy at 100 Hz, "
        f"{duration:g} s from 2 s after the load starts, 4 s for the slow streams).\n\n"
    )
    (RESULTS / "profile-summary.md").write_text(header + summaries(paths))


def _distinct_threads(pid: int, *, seconds: float) -> dict[str, Any]:
    """How many distinct threads the process shows over a few seconds (thread churn)."""
    seen: set[str] = set()
    samples = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and samples < 10_000:
        with contextlib.suppress(OSError):
            seen.update(os.listdir(f"/proc/{pid}/task"))
        samples += 1
        time.sleep(0.005)
    alive = len(os.listdir(f"/proc/{pid}/task"))
    return {
        "seconds": seconds,
        "distinct_threads": len(seen),
        "alive_now": alive,
        "samples": samples,
    }
