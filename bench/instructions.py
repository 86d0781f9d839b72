"""Count the instructions Mortar executes per request, before and after a change, with callgrind.

Wall-clock benchmarks on a shared virtual machine move by ±20% from one round to the next (the
host's other tenants); instruction counts do not. Each Mortar — the working tree's, and the
baseline's with `--baseline REF` — runs as `make bench` runs it (uvicorn, one worker, everything
on, Postgres and Redis), but under `valgrind --tool=callgrind`. For each load the script warms the
server up, zeroes callgrind's counters, sends the requests, waits for the run writer to record
them, and dumps the counters: the process's instructions (every thread: event loop, run writer,
executor) divided by the requests.

Loads: a non-streaming request and a 20-chunk stream, each at one connection and at 32, and
streams whose chunks arrive 20 ms apart, 8 at once, and 40 ms apart, one at a time (what 1,000
slow streams cost); and the same message and stream through `POST /v1/messages` at one
connection, beside the chat completions' (what Anthropic's shapes cost). At 32 connections
what lands in one read or one writer batch depends on timing, so those counts move by a few
percent between runs; at one connection they repeat to within a fraction of a percent. Only the
one-at-a-time slow stream relays each chunk on its own: under callgrind the 8 at once (400
chunks/s) are more than the process keeps up with, so their chunks queue and go out several to
a read and a write (14 M instructions a stream, against 37 M one at a time, at 415faff). The
one-at-a-time count still moves by up to 20% between runs: the run writer's thread batches rows
by time; the event loop's thread alone repeats to a few percent.

    .venv/bin/python -m bench instructions [--baseline REF | --unmetered] [--requests N]

(`--unmetered`: beside the working tree's Mortar, whose organization and key have budgets and
rate limits, the same tree without them — what the checks cost; both price the model.)

Writes bench/results/instructions.md and .json. Takes about 10 minutes (valgrind runs Python
some 50 times slower).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.commands import program
from bench.harness.baseline import Baseline, baseline_checked_out
from bench.harness.constants import LOGS, MODEL, RESULTS
from bench.harness.metrics import TIMES
from bench.harness.mortar import MortarSetup, mortar_sources
from bench.harness.processes import Processes
from bench.harness.scenarios import CHAT, MESSAGES, PATHS, request_body, request_headers
from bench.harness.targets import Target, start_everything


@dataclass(frozen=True)
class Load:
    name: str
    title: str
    stream: bool
    connections: int
    delay_ms: int = 0
    chunks: int = 20
    share: float = 1.0  # of --requests
    surface: str = CHAT

    def body(self) -> bytes:
        return request_body(
            MODEL,
            stream=self.stream,
            delay_ms=self.delay_ms,
            chunks=self.chunks,
            surface=self.surface,
        )


LOADS = (
    Load("json-1", "non-streaming, one connection", stream=False, connections=1),
    Load("stream-1", "20-chunk stream, one connection", stream=True, connections=1),
    Load("json-32", "non-streaming, 32 connections", stream=False, connections=32),
    Load("stream-32", "20-chunk streams, 32 connections", stream=True, connections=32),
    Load(
        "lone-chunks",
        "streams of 50 chunks 20 ms apart, 8 at once",
        stream=True,
        connections=8,
        delay_ms=20,
        chunks=50,
        share=0.1,
    ),
    Load(
        "lone-chunk",
        "streams of 50 chunks 40 ms apart, one at a time",
        stream=True,
        connections=1,
        delay_ms=40,
        chunks=50,
        share=0.05,
    ),
    Load(
        "messages-json-1",
        "Messages, non-streaming, one connection",
        stream=False,
        connections=1,
        surface=MESSAGES,
    ),
    Load(
        "messages-stream-1",
        "Messages, 20-chunk stream, one connection",
        stream=True,
        connections=1,
        surface=MESSAGES,
    ),
)
RECORD_WAIT_S = 3.0  # the run writer's batches land well within this


class Callgrind:
    """A Mortar process under callgrind: zero its counters, dump them, read the total."""

    def __init__(self, out: Path, pid: int) -> None:
        self.out, self.pid = out, pid

    def zero(self) -> None:
        _control("-z", str(self.pid))

    def instructions(self) -> int:
        before = set(self.out.parent.glob(f"{self.out.name}*"))
        _control("-d", str(self.pid))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            dumps = set(self.out.parent.glob(f"{self.out.name}*")) - before
            for dump in dumps:
                total = _total(dump)
                if total is not None:
                    return total
            time.sleep(0.2)
        raise RuntimeError(f"callgrind wrote no dump for pid {self.pid}")


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=60)


def _total(dump: Path) -> int | None:
    with dump.open(errors="replace") as lines:
        for line in lines:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    return None


async def send(target: Target, load: Load, requests: int) -> None:
    headers = {**request_headers(target.auth, load.surface), "Content-Type": "application/json"}
    url = target.base + PATHS[load.surface]
    body = load.body()
    limits = httpx.Limits(max_connections=load.connections)
    async with httpx.AsyncClient(headers=headers, timeout=600, limits=limits) as client:

        async def one_connection(count: int) -> None:
            for _ in range(count):
                reply = await client.post(url, content=body)
                await reply.aread()
                if reply.status_code != 200:
                    raise RuntimeError(f"{target.name}: {reply.status_code} {reply.text[:300]}")

        share = requests // load.connections
        await asyncio.gather(*(one_connection(share) for _ in range(load.connections)))


def measure(target: Target, counter: Callgrind, load: Load, requests: int) -> float:
    requests = max(
        load.connections, int(requests * load.share) // load.connections * load.connections
    )
    asyncio.run(send(target, load, max(load.connections, requests // 5)))  # warm up
    time.sleep(RECORD_WAIT_S)
    counter.zero()
    asyncio.run(send(target, load, requests))
    time.sleep(RECORD_WAIT_S)
    return counter.instructions() / requests


@contextlib.contextmanager
def maybe_baseline(ref: str | None, parent: Path) -> Iterator[Baseline | None]:
    if ref is None:
        yield None
        return
    with baseline_checked_out(ref, parent) as baseline:
        yield baseline


def render(results: dict[str, dict[str, float]], names: list[str], requests: int) -> str:
    lines = [
        "# Instructions per request (callgrind)",
        "",
        f"Run {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, {requests} requests a load "
        "(slow streams: a tenth of that 8 at once, a twentieth one at a time), every thread of "
        "the Mortar process counted.",
        "",
        "| Load | " + " | ".join(names) + (" | after vs before |" if len(names) == 2 else ""),
        "| --- |" + " ---: |" * (len(names) + (1 if len(names) == 2 else 0)),
    ]
    for load in LOADS:
        row = results[load.name]
        cells = [f"{row[name] / 1e6:.3f} M" for name in names]
        if len(names) == 2:
            cells.append(f"{row[names[0]] / row[names[1]]:.3f}{TIMES}")
        lines.append(f"| {load.title} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", metavar="REF", help="also count Mortar at this revision")
    parser.add_argument(
        "--unmetered",
        action="store_true",
        help="instead of a baseline: the working tree without budgets or rate limits (priced)",
    )
    parser.add_argument("--requests", type=int, default=320, help="per load (default 320)")
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    LOGS.mkdir(exist_ok=True)
    processes = Processes()
    with (
        tempfile.TemporaryDirectory(prefix="mortar-instructions-") as tmp,
        maybe_baseline(args.baseline, Path(tmp)) as baseline,
    ):
        dumps = Path(tmp) / "callgrind"
        dumps.mkdir()

        def under_callgrind(setup: MortarSetup) -> list[str]:
            out = dumps / setup.name.replace("@", "-at-")
            return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]

        try:
            bench = start_everything(
                processes,
                Path(tmp),
                mortars=mortar_sources(baseline, unmetered=args.unmetered),
                litellm=False,
                launcher=under_callgrind,
                startup_timeout=600,
            )
            mortars = bench.mortars()
            names = [t.name for t in mortars]
            counters = {
                t.name: Callgrind(dumps / t.name.replace("@", "-at-"), t.server.pid)
                for t in mortars
                if t.server is not None
            }
            results: dict[str, dict[str, float]] = {}
            for load in LOADS:
                for target in mortars:
                    per_request = measure(target, counters[target.name], load, args.requests)
                    results.setdefault(load.name, {})[target.name] = per_request
                    print(f"{load.name:12} {target.name:18} {per_request / 1e6:8.3f} M", flush=True)
        finally:
            processes.stop_all()
    report = render(results, names, args.requests)
    (RESULTS / "instructions.md").write_text(report)
    (RESULTS / "instructions.json").write_text(
        json.dumps(
            {"requests": args.requests, "baseline": args.baseline, "results": results}, indent=1
        )
    )
    print(report)
