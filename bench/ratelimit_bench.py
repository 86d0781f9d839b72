"""Measure the CPU this process spends on rate limits per request, against the real Redis
(issue 14: budget + rate checks ≤ 0.15 ms of CPU per request).

Each simulated request does what the pipeline does for a key with all four limits set (the
organization's and the key's requests and tokens per minute): the admission (one EVALSHA of
`core/backplane/ratelimit.lua` on the pipelined connection, awaited), the `x-ratelimit-*`
headers rendered from it, and the usage counted when it ends (one EVALSHA nobody waits for).
CONCURRENCY requests interleave on one event loop (uvloop, as `make serve` runs). Prints CPU µs
per request (process time, all threads) less the same loop without the limiter, and the wall
time of an admission; `--memory` measures the embedded mode's in-process limiter instead.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/ratelimit_bench.py \
        [--requests 5000] [--rounds 5] [--concurrency 1 32] [--memory]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
os.environ.setdefault("MORTAR_REDIS_PREFIX", "bench-ratelimit")

import django  # noqa: E402

django.setup()

import uvloop  # noqa: E402

from billing.services.ratelimits import Limited  # noqa: E402
from core.backplane import Backplane  # noqa: E402
from core.backplane.memory import MemoryBackplane  # noqa: E402
from core.backplane.redis import RedisBackplane  # noqa: E402
from core.ratelimits import Bucket  # noqa: E402

# High enough that nothing is refused: the cost of an admitted request is what is measured.
RPM, TPM = 10_000_000, 1_000_000_000
PROMPT, COMPLETION = 420, 180


async def one_request(plane: Backplane, org: int, key: int, admits: list[float]) -> None:
    buckets = (
        Bucket(f"org:{org}:requests", RPM, 1),
        Bucket(f"org:{org}:tokens", TPM, PROMPT),
        Bucket(f"key:{key}:requests", RPM, 1),
        Bucket(f"key:{key}:tokens", TPM, PROMPT),
    )
    started = time.perf_counter()
    verdict = await plane.rate_admit(buckets)
    admits.append(time.perf_counter() - started)
    assert verdict is not None and verdict.admitted
    limited = Limited(buckets=buckets, verdict=verdict)
    limited.headers()
    await asyncio.sleep(0)  # the generation
    plane.rate_count(limited.token_buckets(COMPLETION))


async def null_request() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def run(
    plane: Backplane, requests: int, concurrency: int, real: bool
) -> tuple[float, list[float]]:
    admits: list[float] = []
    counter = iter(range(requests))

    async def worker(org: int) -> None:
        for n in counter:
            if real:
                await one_request(plane, org, 100 + n % 50, admits)
            else:
                await null_request()

    cpu = time.process_time()
    await asyncio.gather(*(worker(1 + i % 3) for i in range(concurrency)))
    await plane.barrier()
    return time.process_time() - cpu, admits


async def main(args: argparse.Namespace) -> None:
    plane: Backplane = (
        MemoryBackplane()
        if args.memory
        else RedisBackplane(os.environ["REDIS_URL"], os.environ["MORTAR_REDIS_PREFIX"])
    )
    await plane.start()
    await run(plane, 500, 8, True)  # warm up: the connection, the script in Redis's cache
    print(f"rate limits on {plane.name}, 4 buckets per request")
    for concurrency in args.concurrency:
        results = []
        for _ in range(args.rounds):
            null_cpu, _ = await run(plane, args.requests, concurrency, False)
            cpu, admits = await run(plane, args.requests, concurrency, True)
            results.append(((cpu - null_cpu) * 1e6 / args.requests, admits))
        per_request = statistics.median(r[0] for r in results)
        admits = [t for r in results for t in r[1]]
        print(
            f"concurrency {concurrency:>3}: {per_request:6.1f} CPU µs per request "
            f"(rounds: {', '.join(f'{r[0]:.1f}' for r in results)}); "
            f"admission wall p50 {statistics.median(admits) * 1e6:.0f} µs"
        )
    await plane.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--memory", action="store_true")
    uvloop.run(main(parser.parse_args()))
