"""Measure what candidate hot-path changes would buy, before anyone makes them.

Starts the mock (core 1) and, one after another, Mortar variants (core 0) wrapped by
`bench/whatif_asgi.py`, which counts `sync_to_async` thread hops and threads started per
request and applies opt-in experiments. Each variant gets the throughput scenarios (wrk,
32 connections) and the one-connection latencies (bench/loadgen.py), like `bench/run.py`.

    .venv/bin/python bench/whatif.py [--duration S] [--aiohttp-site DIR]

The aiohttp-transport variant needs `httpx-aiohttp`, e.g.
`.venv/bin/pip install --no-deps --target /tmp/whatif-site httpx-aiohttp` and
`--aiohttp-site /tmp/whatif-site`; without it that variant is skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import run as harness  # bench/run.py

# Each variant adds one change to the one before: name, environment, uvicorn access log on.
# (Earlier variants — only Mortar's middleware on /v1/, one shared thread-sensitive executor,
# the aiohttp transport, httpx's INFO log off — are in the code since b9d2d01; the wrapper's
# switches for them stay, for measuring older checkouts: BENCH_SHARED_EXECUTOR,
# BENCH_AIOHTTP_TRANSPORT, DJANGO_SETTINGS_MODULE=bench.whatif_settings.)
VARIANTS: list[tuple[str, dict[str, str], bool]] = [
    ("as checked out, with uvicorn's access log", {}, True),
    ("+ no uvicorn access log", {}, False),
    ("+ gc.freeze() and a 50,000 young-generation threshold", {"BENCH_GC_TUNE": "1"}, False),
]


def start_mortar(
    processes: harness.Processes, env: dict[str, str], port: int, access_log: bool, name: str
) -> harness.Started:
    command = [
        "taskset", "-c", harness.SERVER_CORE, harness.PYTHON, "-m", "uvicorn",
        "bench.whatif_asgi:application", "--host", "127.0.0.1", "--port", str(port),
        "--loop", "uvloop", "--http", "httptools", "--workers", "1",
    ]  # fmt: skip
    if not access_log:
        command.append("--no-access-log")
    started = processes.start(name, command, env=env)
    harness.wait_http(f"http://127.0.0.1:{port}/healthz", started, 60)
    return started


def counts(base: str, *, reset: bool = False) -> dict[str, int]:
    method = "DELETE" if reset else "GET"
    return httpx.request(method, f"{base}/_bench/counts", timeout=10).json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--aiohttp-site", default="")
    args = parser.parse_args()
    harness.ensure_tools()
    os.sched_setaffinity(0, {int(harness.LOAD_CORE)})
    harness.LOGS.mkdir(parents=True, exist_ok=True)
    admin_url, db_url = harness.database_urls()
    redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    prefix = f"mortar-whatif-{secrets.token_hex(4)}"
    processes = harness.Processes()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mortar-whatif-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            harness.recreate_database(admin_url)
            mock_port = harness.free_port()
            env = {
                **harness.base_env(),
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "DATABASE_URL": db_url,
                "REDIS_URL": redis_url,
                "MORTAR_REDIS_PREFIX": prefix,
                "MORTAR_VAR_DIR": str(tmp / "var"),
                "SECRET_KEY": "bench-only-" + secrets.token_hex(8),
            }
            harness.manage(env, "migrate", "--noinput")
            config = tmp / "c.yaml"
            config.write_text(
                f"deployments:\n  - name: bench-mock\n"
                f"    upstreams: ['http://127.0.0.1:{mock_port}/v1']\n"
                f"    upstream_model: {harness.UPSTREAM_MODEL}\n"
                f"models:\n  - id: {harness.MODEL}\n    deployment: bench-mock\n"
                "    context_window: 32768\norganizations:\n  - name: bench\n"
            )
            harness.manage(env, "applyconfig", str(config))
            secret = "mk-bench-" + secrets.token_hex(16)
            harness.manage(env, "createkey", "bench", "--secret", secret)
            mock = processes.start(
                "whatif-mock",
                ["taskset", "-c", harness.LOAD_CORE, harness.PYTHON, "-m", "mockmodel",
                 "--host", "127.0.0.1", "--port", str(mock_port)],
                env=harness.base_env(),
            )  # fmt: skip
            harness.wait_http(f"http://127.0.0.1:{mock_port}/healthz", mock, 30)
            for name, extra, access_log in VARIANTS:
                variant_env = {**env, **extra}
                if "BENCH_AIOHTTP_TRANSPORT" in extra:
                    if not args.aiohttp_site:
                        print(f"skipping {name!r}: no --aiohttp-site", flush=True)
                        continue
                    variant_env["PYTHONPATH"] = args.aiohttp_site
                port = harness.free_port()
                server = start_mortar(processes, variant_env, port, access_log, "whatif-mortar")
                try:
                    results.append(
                        measure_variant(name, server, port, secret, tmp, mock, args.duration)
                    )
                finally:
                    harness._stop(server)
                    processes.started.remove(server)
        finally:
            processes.stop_all()
            with contextlib.suppress(Exception):
                harness.clean_redis(redis_url, prefix)
            with contextlib.suppress(Exception):
                harness.drop_database(admin_url)
    out = harness.RESULTS / "whatif.json"
    out.write_text(json.dumps(results, indent=1))
    text = render(results)
    (harness.RESULTS / "whatif.md").write_text(text)
    print("\n" + text)


def measure_variant(
    name: str,
    server: harness.Started,
    port: int,
    secret: str,
    tmp: Path,
    mock: harness.Started,
    duration: float,
) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    target = harness.Target("mortar", f"{base}/v1/chat/completions", secret, harness.MODEL, server)
    harness.check_target(target)
    bench = harness.Bench(
        tmp=tmp, mock=mock, mortar=server, litellm=server, mortar_base=base,
        redis_url="", redis_prefix="", bench_db_url="",
    )  # fmt: skip
    bench.targets = {"direct": target}  # only used to find the mock's stats; see below
    by_name = {s.name: s for s in harness.SCENARIOS}
    row: dict[str, Any] = {"variant": name}
    for scenario_name in ("json-32", "stream-32"):
        scenario = by_name[scenario_name]
        harness.run_wrk(target, scenario, bench, 2)  # warm-up
        time.sleep(1)
        before = harness.cpu_seconds(harness._session_pids(server.pid))
        result = harness.run_wrk(target, scenario, bench, duration)
        cpu = harness.cpu_seconds(harness._session_pids(server.pid)) - before
        row[scenario_name] = {
            "rps": result["rps"],
            "p50_ms": result["latency_p50_ms"],
            "failed": result["failed"],
            "cpu_ms_per_request": round(cpu * 1000 / max(result["requests"], 1), 3),
        }
    for scenario_name in ("json-1", "stream-1"):
        scenario = by_name[scenario_name]
        time.sleep(1)
        counts(base, reset=True)
        result = harness.run_loadgen(target, scenario, bench, duration / 2)
        counted = counts(base)
        requests = max(counted.get("requests", 1), 1)
        row[scenario_name] = {
            "first_p50_ms": result["first"]["p50_ms"],
            "total_p50_ms": result["total"]["p50_ms"],
            "total_p99_ms": result["total"]["p99_ms"],
            "hops_per_request": round(counted.get("hops", 0) / requests, 2),
            "threads_per_request": round(counted.get("threads started", 0) / requests, 2),
            "hops": {
                k.removeprefix("hop "): round(v / requests, 2)
                for k, v in sorted(counted.items(), key=lambda kv: -kv[1])
                if k.startswith("hop ")
            },
        }
    slow = harness.dataclasses.replace(
        by_name["slow-1000"],
        chunks=int((harness.SLOW_RAMP_S + 10) * 1000 / harness.SLOW_DELAY_MS),
    )
    time.sleep(2)
    result = harness.run_loadgen(target, slow, bench, 10)
    row["slow-1000"] = {
        "completed": result["completed"],
        "unfinished": result["unfinished"],
        "stalled": result["stalled"],
        "failed": result["failed"],
        "gap_p50_ms": result["token_gap"]["p50_ms"],
        "gap_p99_ms": result["token_gap"]["p99_ms"],
        "ttft_p50_ms": result["ttft"]["p50_ms"],
        "tokens_per_s": result["tokens_per_s"],
    }
    harness.wait_quiet_server(server, seconds=60)
    print(f"{name}: {json.dumps(row)}", flush=True)
    return row


def render(results: list[dict[str, Any]]) -> str:
    lines = [
        "# What-if: Mortar variants on one core (bench/whatif.py)",
        "",
        "| Variant | json-32 req/s | CPU ms/req | stream-32 streams/s | CPU ms/stream "
        "| json-1 p50 ms | stream-1 p50 ms | hops/req | threads/req "
        "| slow-1000 whole | gap p99 ms | tokens/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in results:
        lines.append(
            f"| {row['variant']} | {row['json-32']['rps']:,.0f} "
            f"| {row['json-32']['cpu_ms_per_request']:.2f} "
            f"| {row['stream-32']['rps']:,.0f} | {row['stream-32']['cpu_ms_per_request']:.2f} "
            f"| {row['json-1']['total_p50_ms']:.2f} | {row['stream-1']['total_p50_ms']:.2f} "
            f"| {row['json-1']['hops_per_request']:g} | {row['json-1']['threads_per_request']:g} "
            f"| {row['slow-1000']['completed']} | {row['slow-1000']['gap_p99_ms']} "
            f"| {row['slow-1000']['tokens_per_s']:,.0f} |"
        )
    if results:
        hops = results[0]["json-1"]["hops"]
        lines += ["", f"Thread hops per non-streaming request, {results[0]['variant']}:", ""]
        lines += [f"- {count:g} x {hop}" for hop, count in hops.items()] or ["- none"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
