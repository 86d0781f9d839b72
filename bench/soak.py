"""A soak: one Mortar serving streams without a pause for ten minutes, then an audit of what it
stored against what its clients received (docs/reliability.md).

Mortar runs as `make bench` runs it (uvicorn, one worker pinned to core 0, Postgres and Redis,
every chunk recorded), without prices, budgets or limits. CONNECTIONS clients on core 1 send
20-chunk streams back to back through the mock model server; each keeps the run id and how many
server-sent events it received. At the end the writer is given time to drain, and the audit
counts the chunk rows stored for those runs: they must equal the events received. The worker's
resident memory is sampled at the start, every minute, and at the end.

    .venv/bin/python -m bench soak [--minutes 10] [--connections 32]

Writes bench/results/soak.md and soak.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

from bench.commands import program
from bench.harness.constants import LOAD_CORE, MODEL, RESULTS
from bench.harness.mortar import UNMETERED, mortar_sources
from bench.harness.processes import Processes
from bench.harness.scenarios import request_body
from bench.harness.targets import Target, start_everything


def resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def clients(
    target: Target, seconds: float, connections: int, failures: list[str]
) -> dict[str, int]:
    """Streams back to back until `seconds` have passed: run id → events received; what went
    wrong (a status other than 200, a broken connection) is added to `failures`."""
    received: dict[str, int] = {}
    body = request_body(MODEL, stream=True)
    headers = {"Authorization": f"Bearer {target.auth}", "Content-Type": "application/json"}
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one_client() -> None:
            while time.monotonic() < deadline:
                try:
                    async with client.stream(
                        "POST", target.url, content=body, headers=headers
                    ) as reply:
                        data = await reply.aread()
                except httpx.HTTPError as error:
                    failures.append(f"{type(error).__name__}: {error}")
                    continue
                if reply.status_code == 200:
                    received[reply.headers["X-Mortar-Run-Id"]] = data.count(b"\n\n")
                else:
                    failures.append(f"HTTP {reply.status_code}")

        await asyncio.gather(*(one_client() for _ in range(connections)))
    return received


def stored_chunks(database_url: str, run_ids: list[str]) -> tuple[int, int]:
    """(runs found, chunk rows) for these runs."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT r.id), count(c.run_id) FROM telemetry_run r "
            "LEFT JOIN telemetry_runchunk c ON c.run_id = r.id WHERE r.id = ANY(%s)",
            [run_ids],
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args(argv)
    os.sched_setaffinity(0, {int(LOAD_CORE)})
    RESULTS.mkdir(exist_ok=True)
    processes = Processes()
    with tempfile.TemporaryDirectory(prefix="mortar-soak-") as tmp:
        try:
            sources = [s for s in mortar_sources(None, unmetered=True) if s.name == UNMETERED]
            bench = start_everything(processes, Path(tmp), mortars=sources, litellm=False)
            target = bench.targets[UNMETERED]
            assert target.server is not None and target.mortar is not None
            pid = target.server.process.pid
            failures: list[str] = []
            asyncio.run(clients(target, 5, 4, []))  # warm up
            rss = [(0.0, resident_mib(pid))]
            started = time.monotonic()
            received: dict[str, int] = {}
            minutes = max(1, round(args.minutes))
            for _ in range(minutes):
                received |= asyncio.run(
                    clients(target, args.minutes * 60 / minutes, args.connections, failures)
                )
                rss.append((round((time.monotonic() - started) / 60, 1), resident_mib(pid)))
            elapsed = time.monotonic() - started
            time.sleep(5)  # the run writer's last batches
            runs, chunks = stored_chunks(target.mortar.database_url, list(received))
        finally:
            processes.stop_all()
    events = sum(received.values())
    report = {
        "minutes": round(elapsed / 60, 1),
        "connections": args.connections,
        "streams": len(received),
        "streams_per_s": round(len(received) / elapsed, 1),
        "events_received": events,
        "runs_stored": runs,
        "chunks_stored": chunks,
        "failed_requests": len(failures),
        "failures": sorted(set(failures))[:20],
        "rss_mib": [(at, round(mib, 1)) for at, mib in rss],
    }
    (RESULTS / "soak.json").write_text(json.dumps(report, indent=1))
    verdict = "equal" if (runs, chunks) == (len(received), events) else "NOT equal"
    text = (
        f"# Soak\n\n{report['minutes']} min, {args.connections} connections: "
        f"{len(received):,} streams ({report['streams_per_s']}/s); events received "
        f"{events:,}, chunk rows stored {chunks:,} for {runs:,} runs — {verdict}; "
        f"{len(failures)} requests failed ({'; '.join(report['failures']) or 'none'}). Worker RSS "
        f"(MiB) by minute: {', '.join(f'{mib:.0f}' for _, mib in report['rss_mib'])}.\n"
    )
    (RESULTS / "soak.md").write_text(text)
    print(text)
