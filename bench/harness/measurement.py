"""One measurement: wait until everything is quiet, load one target with one scenario, and
account for the CPU every part spent (servers, Postgres, Redis, the load generators)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import httpx

from .constants import QUIET_CPU_SHARE, QUIET_TIMEOUT_S
from .cpu import (
    children_cpu,
    core_busy_seconds,
    cpu_seconds,
    database_backends,
    pids_named,
    process_cpu_seconds,
    system_calls,
)
from .load import run_loadgen, run_wrk
from .processes import session_pids
from .scenarios import Scenario
from .stores import pg_counters, redis_commands
from .targets import Bench, Target


def server_cpu(bench: Bench) -> dict[str, float]:
    """CPU seconds so far of each gateway, the mock, the bench databases' backends and Redis.

    A server's is its whole session's: uvicorn's supervisor and every worker it started (they
    stay in the session it was started in), not the supervisor alone."""
    cpu = {t.name: cpu_seconds(session_pids(t.server.pid)) for t in bench.gateways() if t.server}
    cpu["mock"] = cpu_seconds(session_pids(bench.mock.pid))
    cpu["postgres"] = cpu_seconds(database_backends(bench.databases()))
    cpu["redis"] = cpu_seconds(pids_named("redis-server"))
    return cpu


def mortar_ready(target: Target) -> dict[str, Any]:
    """What the Mortar's /readyz says (the run writer's backlog among it); {} if it cannot."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        ready: dict[str, Any] = httpx.get(f"{target.base}/readyz", timeout=5).json()
        return ready
    return {}


def mock_in_flight(bench: Bench) -> int:
    url = bench.targets["direct"].url.replace("/v1/chat/completions", "/_mock/stats")
    with contextlib.suppress(httpx.HTTPError, ValueError):
        return int(httpx.get(url, timeout=5).json()["in_flight"])
    return -1


def wait_quiet(bench: Bench) -> float:
    """Wait (bounded) until the writers have drained, the mock is idle and no server burns CPU."""
    servers = [t.name for t in bench.gateways()] + ["mock"]
    started = time.monotonic()
    deadline = started + QUIET_TIMEOUT_S
    for _ in range(10_000):
        if time.monotonic() >= deadline:
            print(f"    (not quiet after {QUIET_TIMEOUT_S:.0f}s; going on)", flush=True)
            break
        before = server_cpu(bench)
        time.sleep(0.3)
        after = server_cpu(bench)
        busy = max((after[k] - before[k]) / 0.3 for k in servers)
        backlog = any(
            mortar_ready(t).get("run_writer", {}).get("queue_depth") for t in bench.mortars()
        )
        if busy < QUIET_CPU_SHARE and not backlog and mock_in_flight(bench) == 0:
            break
    return round(time.monotonic() - started, 2)


def measure(bench: Bench, target: Target, scenario: Scenario, duration: float) -> dict[str, Any]:
    quiet_s = wait_quiet(bench)
    mortar = target.mortar
    pg_before = pg_counters(mortar.database_url, mortar.database) if mortar else {}
    redis_before = redis_commands(bench.redis_url) if mortar else {}
    workers = target.mortar.of.workers > 1 if target.mortar else False
    processes_before = _session_cpu(target) if workers else {}
    calls_before = _session_calls(target)
    writer_before = mortar_ready(target).get("run_writer", {}) if mortar else {}
    cpu_before = server_cpu(bench)
    load_before = children_cpu()
    cores_before = core_busy_seconds()
    started = time.monotonic()
    if scenario.kind == "wrk":
        result = run_wrk(target, scenario, bench.tmp, duration)
    else:
        result = run_loadgen(target, scenario, bench.tmp, duration)
    wall = time.monotonic() - started
    load_cpu = children_cpu() - load_before
    cores_after = core_busy_seconds()
    cpu_after = server_cpu(bench)
    calls_after = _session_calls(target)
    processes_after = _session_cpu(target) if workers else {}
    writer_after = mortar_ready(target).get("run_writer", {}) if mortar else {}
    pg_after = pg_counters(mortar.database_url, mortar.database) if mortar else {}
    redis_after = redis_commands(bench.redis_url) if mortar else {}
    cpu = {k: round(cpu_after[k] - cpu_before[k], 2) for k in cpu_before}
    if target.server:
        result["system_calls"] = {k: calls_after[k] - calls_before[k] for k in calls_before}
    if not workers and "spilled_total" in writer_after and "spilled_total" in writer_before:
        # Rows the run writer spilled to its spool in the measurement: it fell that far behind
        # (one worker: /readyz answers for the worker it reaches).
        result["writer_spilled"] = writer_after["spilled_total"] - writer_before["spilled_total"]
    result.update(
        wall_s=round(wall, 2),
        quiet_wait_s=quiet_s,
        cpu_s=cpu,
        loadgen_cpu_s=round(load_cpu, 2),
        core1_busy=round((cpu["mock"] + load_cpu) / wall, 2),
        # Whole-CPU utilization: more than the servers and the load explain means something
        # else on the machine competed (the numbers are then suspect).
        cores_busy={k: round((cores_after[k] - cores_before[k]) / wall, 2) for k in cores_after},
        unexplained_cpu_s=round(
            sum(cores_after[k] - cores_before[k] for k in cores_after)
            - sum(cpu.values())
            - load_cpu,
            2,
        ),
    )
    if workers:
        # How the load split between the workers (the kernel hands each connection to one):
        # each process's CPU in the measurement, the supervisor's among them, largest first.
        result["process_cpu_s"] = sorted(
            (
                round(cpu - processes_before.get(pid, 0.0), 2)
                for pid, cpu in processes_after.items()
            ),
            reverse=True,
        )
    count = request_count(result)
    if mortar and count:
        result["writer_after"] = writer_after
        result["per_request"] = {
            "mortar_cpu_ms": round(cpu[target.name] * 1000 / count, 3),
            "postgres_cpu_ms": round(cpu["postgres"] * 1000 / count, 3),
            "redis_cpu_ms": round(cpu["redis"] * 1000 / count, 3),
            "pg_sessions": round((pg_after["sessions"] - pg_before["sessions"]) / count, 4),
            "pg_rows_inserted": round(
                (pg_after["tup_inserted"] - pg_before["tup_inserted"]) / count, 2
            ),
            "redis_commands": {
                name: round((calls - redis_before.get(name, 0)) / count, 2)
                for name, calls in redis_after.items()
                if calls - redis_before.get(name, 0) >= count / 10
            },
        }
    elif target.kind == "litellm" and count:
        result["per_request"] = {"litellm_cpu_ms": round(cpu["litellm"] * 1000 / count, 3)}
    return result


def request_count(result: dict[str, Any]) -> int:
    """Requests the CPU figures can be divided by (none for the slow streams)."""
    if "rps" in result:
        return int(result["requests"])
    if result.get("mode") == "slow":
        # Streams counted in the window only; the CPU covers ramp-up and drain too.
        return 0
    return int(result.get("requests", 0))


def _session_calls(target: Target) -> dict[str, int]:
    return system_calls(session_pids(target.server.pid)) if target.server else {}


def _session_cpu(target: Target) -> dict[int, float]:
    """CPU seconds so far of each process of a server's session."""
    return process_cpu_seconds(session_pids(target.server.pid)) if target.server else {}
