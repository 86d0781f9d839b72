"""Measure the CPU this process spends on spend control per request: the budget hold and the rate
limits, as the pipeline runs them, against the real Postgres and Redis (budget: ≤ 0.15 ms).

Each simulated request takes the path of a request whose organization and key both have a budget
and requests and tokens per minute (too large to refuse anything) on a priced model:
`rate_limits_take` (one EVALSHA, awaited), `hold_for` (from the worker's slice of the
budgets, in memory; the ledger's thread, batched, only for the first hold and each slice), the
`x-ratelimit-*` headers, the generation (one loop pass), the charge and the usage counted
against the token limits. CONCURRENCY requests interleave on one event loop (uvloop, as `make
serve` runs). The draw from the slice is not here: the run's own insert takes it, in Postgres
(a trigger on the run table). The settlement the charge starts is, awaited as the response's
end awaits it (`bench/micro/settle.py` measures it alone).

Prints the process's CPU per request (process time: every thread) less the same loop doing
nothing but its awaits, per concurrency; the median of the rounds. `make bench` measures the
same thing end to end (Mortar beside its unmetered twin); this isolates it, and takes seconds:
one change at a time.

    .venv/bin/python -m bench micro spend-control [--requests 3000] [--rounds 5]
        [--concurrency 1 32]

Its own database (`mortar_bench_spend`, created and dropped again) and Redis prefix. Writes
bench/results/spend-control.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
from decimal import Decimal

DATABASE = "mortar_bench_spend"
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
os.environ["MORTAR_REDIS_PREFIX"] = f"bench-spend-{secrets.token_hex(4)}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import uvloop  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from accounts.models import ApiKey, Organization  # noqa: E402
from bench.commands import program  # noqa: E402
from bench.harness.results import recorded  # noqa: E402
from billing.costs import Prices, usage_cost  # noqa: E402
from billing.services.holds import hold_for  # noqa: E402
from billing.services.ratelimits import count_usage, rate_limits_take  # noqa: E402
from core.backplane import backplane  # noqa: E402

PRICES = Prices(input=Decimal("0.20"), cached_input=Decimal("0.05"), output=Decimal("0.60"))
PROMPT, COMPLETION, MAX_TOKENS = 420, 180, 1024
USAGE = {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION}
LIMITS = {"requests_per_minute": 1_000_000_000, "tokens_per_minute": 2_000_000_000}


def bench_key() -> ApiKey:
    organization = Organization.objects.create(
        name="bench", budget_usd=Decimal(1_000_000), budget_period="month", **LIMITS
    )
    key = ApiKey.objects.create(
        organization=organization,
        prefix="bench",
        digest=secrets.token_hex(32),
        budget_usd=Decimal(1_000_000),
        budget_period="total",
        **LIMITS,
    )
    return ApiKey.objects.select_related("organization").get(pk=key.pk)


async def one_request(key: ApiKey) -> None:
    run_id = "chatcmpl-" + secrets.token_hex(12)
    limits = await rate_limits_take(key=key, prompt_tokens=PROMPT)
    assert limits is not None and limits.verdict.admitted
    held = await hold_for(
        run_id=run_id,
        key=key,
        prompt_tokens=PROMPT,
        max_tokens=MAX_TOKENS,
        prices=PRICES,
        total_timeout_s=600.0,
    )
    assert held is not None
    limits.headers()
    await asyncio.sleep(0)  # the generation
    # What the run's close does with money: the charge and the tokens counted.
    held.charge(usage_cost(USAGE, PRICES))
    count_usage(limits, PROMPT, USAGE)
    await held.settled()


async def null_request() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def run(key: ApiKey, requests: int, concurrency: int, real: bool) -> tuple[float, float]:
    """The process's user and system CPU seconds for `requests` requests."""
    counter = iter(range(requests))

    async def worker() -> None:
        for _ in counter:
            if real:
                await one_request(key)
            else:
                await null_request()

    before = os.times()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await backplane().barrier()
    after = os.times()
    return after.user - before.user, after.system - before.system


async def measure_all(args: argparse.Namespace) -> None:
    await asyncio.to_thread(call_command, "migrate", verbosity=0)
    plane = backplane()
    await plane.start()
    key = await asyncio.to_thread(bench_key)
    await run(key, 500, 8, True)  # warm up: connections, prepared statements, the script
    print(f"spend control on Postgres and {plane.name}: a budget and two rate limits each on")
    print("the organization and the key, a priced model; per request, less the null loop")
    for concurrency in args.concurrency:
        results, system = [], []
        for _ in range(args.rounds):
            null_user, null_system = await run(key, args.requests, concurrency, False)
            user, sys_ = await run(key, args.requests, concurrency, True)
            results.append((user + sys_ - null_user - null_system) * 1e6 / args.requests)
            system.append((sys_ - null_system) * 1e6 / args.requests)
        print(
            f"concurrency {concurrency:>3}: {statistics.median(results):6.1f} CPU µs per request, "
            f"{statistics.median(system):.1f} of it in the kernel "
            f"(rounds: {', '.join(f'{r:.1f}' for r in results)})"
        )
    await plane.close()


def psql(command: str, *, check: bool = True) -> None:
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", command], check=check)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    args = parser.parse_args(argv)
    psql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    psql(f"CREATE DATABASE {DATABASE}")
    try:
        with recorded("spend-control", "Spend control per request, in one process"):
            uvloop.run(measure_all(args))
    finally:
        connection.close()
        psql(f"DROP DATABASE {DATABASE} WITH (FORCE)", check=False)
