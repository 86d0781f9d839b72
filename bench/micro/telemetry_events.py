"""Measure the CPU this process spends on Redis per request: the seven telemetry events
(`telemetry/events.py`, XADDs on the Redis backplane's pipelined connection) and the
live-generation registry (`gateway/coordination/stop.py`; in each worker's memory since
8e9edcf, so its share is now ~0 — kept to show that it stays so).

Each simulated request publishes what the pipeline publishes, in its order, registers the
generation, and unregisters it; CONCURRENCY requests interleave on one event loop (uvloop, as
`make serve` runs). Prints CPU ms per 1,000 requests (process time, all threads), less the
same loop with no publish/register/unregister, and the wall time of a register call.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python -m bench micro telemetry-events \
        [--requests 5000] [--concurrency 1 32] [--dashboard]

--dashboard keeps one member in the dashboard's channel-layer group (as a connected websocket
would), so every batch goes to it. BENCH_NO_HIREDIS=1 hides hiredis from redis-py. Writes
bench/results/telemetry-events.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
os.environ.setdefault("MORTAR_REDIS_PREFIX", "bench-telemetry")
if os.environ.get("BENCH_NO_HIREDIS"):
    # Hide hiredis from redis-py, to see what it saves (the pipelined connection needs it). A
    # None in sys.modules makes its import fail, which typeshed's modules-only dict leaves out.
    sys.modules["hiredis"] = None  # type: ignore[assignment]

import django

django.setup()

import uvloop  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402

from bench.commands import program  # noqa: E402
from bench.harness.results import recorded  # noqa: E402
from gateway.coordination.stop import live_generations  # noqa: E402
from telemetry.events import DASHBOARD_GROUP, event_publisher  # noqa: E402

REPORT = {
    "mode": "shadow",
    "passes": [{"name": "dedupe_messages", "tokensSaved": 0}, {"name": "trim", "tokensSaved": 3}],
    "tokensBefore": 42,
    "tokensAfter": 39,
}
USAGE = {"prompt_tokens": 42, "completion_tokens": 20, "total_tokens": 62}


async def one_request(n: int, org: int, registers: list[float], real: bool) -> None:
    run_id = f"chatcmpl-{n:024x}"
    events = event_publisher()
    live = live_generations()

    def publish(event_type: str, **fields: object) -> None:
        if real:
            events.publish(org, event_type, run_id, session="", **fields)

    publish("request.accepted", model="m", deployment="d", endUser="", stream=True)
    await asyncio.sleep(0)
    publish("optimizer.report", report=REPORT)
    if real:
        started = time.perf_counter()
        await live.register(run_id, org)
        registers.append(time.perf_counter() - started)
    await asyncio.sleep(0)
    publish("request.routed", deployment="d", replica="r", sessionKept=None)
    await asyncio.sleep(0)
    publish("generation.first_token", ttftMs=1.2)
    await asyncio.sleep(0)
    publish(
        "generation.finished", finishReason="stop", usage=USAGE, usageSource="model", latencyMs=3
    )
    publish(
        "cache",
        promptTokens=42,
        cachedTokens=0,
        sessionKept=None,
        replica="r",
        usageSource="model",
    )
    publish(
        "cost",
        cost="0.000123",
        promptTokens=42,
        cachedTokens=0,
        completionTokens=20,
        usageSource="model",
    )
    if real:
        live.unregister(run_id)
    await asyncio.sleep(0)


async def run(requests: int, concurrency: int, real: bool) -> tuple[float, float, list[float]]:
    registers: list[float] = []
    counter = iter(range(requests))

    async def worker(org: int) -> None:
        for n in counter:
            await one_request(n, org, registers, real)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(1 + i % 3) for i in range(concurrency)))
    if real:
        await event_publisher().flush()
    return time.process_time() - cpu, time.perf_counter() - wall, registers


async def measure_all(args: argparse.Namespace) -> None:
    await live_generations().start()
    layer = get_channel_layer()
    if args.dashboard and layer is None:
        raise SystemExit("--dashboard needs a channel layer (CHANNEL_LAYERS)")
    dashboard = layer if args.dashboard else None
    channel = ""
    if dashboard is not None:
        channel = await dashboard.new_channel()
        await dashboard.group_add(DASHBOARD_GROUP, channel)
    await run(500, 8, True)  # warm up: connections, imports
    for concurrency in args.concurrency:
        results = []
        for _ in range(args.rounds):
            null_cpu, _, _ = await run(args.requests, concurrency, False)
            cpu, wall, registers = await run(args.requests, concurrency, True)
            results.append(((cpu - null_cpu) * 1e6 / args.requests, wall, registers))
        per_k = statistics.median(r[0] for r in results)
        registers = [t for r in results for t in r[2]]
        print(
            f"concurrency {concurrency:>3}: {per_k:7.1f} CPU ms per 1,000 requests "
            f"(rounds: {', '.join(f'{r[0]:.1f}' for r in results)}); "
            f"register p50 {statistics.median(registers) * 1e6:.1f} µs"
        )
    if dashboard is not None:
        await dashboard.group_discard(DASHBOARD_GROUP, channel)
        await dashboard.flush()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--dashboard", action="store_true")
    args = parser.parse_args(argv)
    with recorded("telemetry-events", "Telemetry events and the live registry per request"):
        uvloop.run(measure_all(args))
