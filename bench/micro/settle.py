"""Measure the CPU this process spends settling a request's budget hold when its response ends
(budget: ≤ 0.05 ms a request), against the real Postgres.

Each simulated request has its hold already (`hold_for`, not measured), then settles it as the
relay does when the response ends: `charge` (the charge, and the settlement queued in the event
loop's batch) and `settled`. Two kinds of hold:

- `slice`: a large budget, each hold drawn from the worker's slice in memory, settled before
  the run writer has stored the run (as a short request is): the settlement takes the draw from
  the slice and leaves its marker. It is settled in the background, with the others of the
  next 0.5 s: `settled` has nothing to wait for, and the round's end waits until every batch
  is committed, so their cost is counted;
- `ledger`: each hold taken from the ledger itself, as near a budget's end (here by raising
  the room a slice needs out of reach): `settled` awaits the thread hop to the ledger's
  thread, one call of `mortar_budget_settle` a batch, its commit.

CONCURRENCY requests settle at once on one event loop (uvloop, as `make serve` runs), and for
slice holds also one client whose requests come PACED_MS apart (as one connection's do), so
that each batch holds only the draws of its 0.5 s. Prints the process's CPU per request
(process time: every thread, so the ledger's too) less the same loop computing each run's
charge as a run's close did before it settled anything (`charge_for`, and the await a hold
from the ledger makes), per kind and concurrency; the median of the rounds. Postgres's own
CPU is not counted here (`make bench` counts it beside Mortar's).

Paced, every request's code runs after the loop slept: on the 2-core development VM the same
few lines take 5 to 10 times their back-to-back CPU then (caches and the core's idle state),
whatever they are; the charge alone, subtracted, runs just as cold.

    .venv/bin/python -m bench micro settle [--requests 2000] [--rounds 5]
        [--concurrency 1 32] [--paced-ms 3.5]

Its own database (`mortar_bench_settle`, created and dropped again). Writes
bench/results/settle.md; exits with status 1 when a median passes the budget: any for slice
holds; for holds from the ledger, at concurrency 32 or more (one request alone whose budget is
near its end pays a whole round trip to Postgres: printed, not held to it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import time
from decimal import Decimal

DATABASE = "mortar_bench_settle"
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
os.environ["MORTAR_REDIS_PREFIX"] = f"bench-settle-{secrets.token_hex(4)}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import uvloop  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from accounts.models import ApiKey, Organization  # noqa: E402
from bench.commands import program  # noqa: E402
from bench.harness.results import recorded  # noqa: E402
from billing.costs import Prices, charge_for, usage_cost  # noqa: E402
from billing.services import slices  # noqa: E402
from billing.services.holds import HeldBudget, hold_for, settlements_drained  # noqa: E402

BUDGET_US = 50.0
# The budget holds under load, where a batch's round trip is shared: one request alone pays a
# whole round trip to Postgres (as a hold from the ledger does), printed beside it.
LOADED = 32
PRICES = Prices(input=Decimal("0.20"), cached_input=Decimal("0.05"), output=Decimal("0.60"))
PROMPT, COMPLETION, MAX_TOKENS = 420, 180, 1024
COST = usage_cost({"prompt_tokens": PROMPT, "completion_tokens": COMPLETION}, PRICES)
KINDS = {"slice": slices.SLICE_MIN_HOLDS, "ledger": 10**12}  # the room a slice needs, in holds
# Paced, a round takes its requests times the pause: fewer of them (3.5 ms: one connection's JSON
# request in `make bench`).
PACED_REQUESTS = 1000
PACED_BLOCK = 100  # about one batch's draws, paced


def bench_key() -> ApiKey:
    organization = Organization.objects.create(
        name=f"bench-{secrets.token_hex(4)}", budget_usd=Decimal(1_000_000), budget_period="month"
    )
    key = ApiKey.objects.create(
        organization=organization,
        prefix="bench",
        digest=secrets.token_hex(32),
        budget_usd=Decimal(1_000_000),
        budget_period="total",
    )
    return ApiKey.objects.select_related("organization").get(pk=key.pk)


async def held(key: ApiKey, count: int) -> list[HeldBudget]:
    """`count` holds, as many requests would have taken them (in batches of 32), of one kind:
    a worker's first hold of a budget goes to the ledger whatever the budget's size (it tells
    how much room there is for slices), so one is taken and settled before them, not counted."""
    first = await new_hold(key)
    assert first is not None
    await settle(first)
    holds: list[HeldBudget] = []
    while len(holds) < count:
        batch = await asyncio.gather(*(new_hold(key) for _ in range(min(32, count - len(holds)))))
        for hold in batch:
            assert hold is not None
            holds.append(hold)
    return holds


async def new_hold(key: ApiKey) -> HeldBudget | None:
    """A request's hold, as the pipeline takes it."""
    return await hold_for(
        run_id="chatcmpl-" + secrets.token_hex(12),
        key=key,
        prompt_tokens=PROMPT,
        max_tokens=MAX_TOKENS,
        prices=PRICES,
        total_timeout_s=600.0,
    )


async def settle(hold: HeldBudget) -> None:
    hold.charge(COST)
    await hold.settled()


async def charge_only(hold: HeldBudget) -> None:
    """What a run's close did before it settled: its charge, for the run's row. (A hold from
    the ledger awaits its batch: one pass of the loop.)"""
    charge_for(COST, hold.amount_usd)
    if hold.draw is None:
        await asyncio.sleep(0)


async def run(holds: list[HeldBudget], concurrency: int, real: bool, pause: float) -> float:
    """The process's CPU seconds (user and system) to settle `holds`, `concurrency` at once,
    each worker pausing `pause` seconds after each (a client's own pace)."""
    queue = iter(holds)

    async def worker() -> None:
        for hold in queue:
            await (settle(hold) if real else charge_only(hold))
            if pause:
                await asyncio.sleep(pause)

    before = time.process_time()  # every thread's CPU, to the microsecond (os.times: 10 ms)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await settlements_drained()  # a slice's draws are settled in the background: counted too
    return time.process_time() - before


async def within_budget(args: argparse.Namespace) -> bool:
    await asyncio.to_thread(call_command, "migrate", verbosity=0)
    within = True
    print("settling a budget hold when the response ends, on Postgres; per request, less the")
    print(
        f"charge alone (budget {BUDGET_US:.0f} µs: slice holds at any concurrency, ledger holds at "
        f"{LOADED} and more)"
    )
    for kind, slice_min_holds in KINDS.items():
        slices.SLICE_MIN_HOLDS = slice_min_holds
        cases = [(concurrency, 0.0, args.requests) for concurrency in args.concurrency]
        if kind == "slice" and args.paced_ms:  # one client, its requests one after another
            cases.append((1, args.paced_ms / 1000, min(args.requests, PACED_REQUESTS)))
        for concurrency, pause, count in cases:
            results = []
            for _ in range(args.rounds):
                key = await asyncio.to_thread(bench_key)  # its own slice, reserved anew
                holds = await held(key, count)
                drawn = sum(hold.draw is not None for hold in holds)
                assert drawn == (len(holds) if kind == "slice" else 0)
                # Paced, the host's drift over a round is larger than what is measured: the
                # charge alone and the settlement take turns, a block each.
                block = PACED_BLOCK if pause else count
                extra = 0.0
                for start in range(0, count, block):
                    some = holds[start : start + block]
                    null = await run(some, concurrency, False, pause)
                    extra += await run(some, concurrency, True, pause) - null
                results.append(extra * 1e6 / count)
            median = statistics.median(results)
            if kind == "slice" or concurrency >= LOADED:
                within &= median <= BUDGET_US
            paced = f", a request every {pause * 1000:g} ms" if pause else ""
            print(
                f"{kind:>6} holds, concurrency {concurrency:>3}{paced}: {median:6.1f} CPU µs "
                f"per request (rounds: {', '.join(f'{r:.1f}' for r in results)})"
            )
    return within


def psql(command: str, *, check: bool = True) -> None:
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", command], check=check)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument(
        "--paced-ms",
        type=float,
        default=3.5,
        help="also one client sending slice-held requests this far apart (0: not measured)",
    )
    args = parser.parse_args(argv)
    psql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    psql(f"CREATE DATABASE {DATABASE}")
    try:
        with recorded("settle", "Settling a budget hold when the response ends, per request"):
            if not uvloop.run(within_budget(args)):
                sys.exit(1)
    finally:
        connection.close()
        psql(f"DROP DATABASE {DATABASE} WITH (FORCE)", check=False)
