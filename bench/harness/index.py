"""Every benchmark in bench/ beside the harness: the question it answers, how to run it (from
the repository's root) and where its latest run is kept. `bench/run.py --help` prints them."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    path: str  # under bench/
    question: str
    command: str
    result: str  # under bench/results/


BENCHMARKS = (
    Benchmark(
        "micro/chunk_bytes.py",
        "How many bytes does the run store keep per streamed chunk (table, indexes, TOAST), and "
        "what did a schema change save?",
        "python -m bench.micro.chunk_bytes [--baseline DIR]",
        "chunk-bytes.md",
    ),
    Benchmark(
        "micro/chunklog.py",
        "What does the crash log cost a chunk appended (budget 2 µs)? `make bench` runs it after "
        "the harness.",
        "python -m bench.micro.chunklog",
        "chunklog.md",
    ),
    Benchmark(
        "micro/writer/",
        "How many chunk rows a second does the run writer store (target 50,000), at what CPU a "
        "row and a run, its own and Postgres's, with memory flat; does a spooled backlog drain?",
        "python -m bench.micro.writer [--soak 600]",
        "writer.md",
    ),
    Benchmark(
        "micro/spend_control.py",
        "What do the budget hold and the rate limits cost a request in Mortar's process "
        "(budget 0.15 ms)?",
        "python -m bench.micro.spend_control",
        "spend-control.md",
    ),
    Benchmark(
        "micro/settle.py",
        "What does settling a request's budget hold when its response ends cost Mortar's "
        "process (budget 0.05 ms under load)? `make bench` runs it after the harness.",
        "python -m bench.micro.settle",
        "settle.md",
    ),
    Benchmark(
        "micro/telemetry_events.py",
        "What do a request's telemetry events (XADDs to Redis) and the live registry cost "
        "Mortar's process?",
        "python -m bench.micro.telemetry_events",
        "telemetry-events.md",
    ),
    Benchmark(
        "micro/observe.py",
        "What do the metrics (budget 50 µs), the JSON log line, tracing when off and CORS cost "
        "a request?",
        "python -m bench.micro.observe",
        "observe.md",
    ),
    Benchmark(
        "micro/validation.py",
        "What does validating a request cost, on chat completions and on Messages?",
        "python -m bench.micro.validation",
        "validation.md",
    ),
    Benchmark(
        "micro/optimizer.py",
        "How long does the prompt optimizer take on a 200 KB agent prompt (median < 5 ms)?",
        "python -m bench.micro.optimizer",
        "optimizer.md",
    ),
    Benchmark(
        "micro/upstream_client.py",
        "What does a request to a model server cost Mortar's client, beside httpx's own "
        "transport and aiohttp alone (the floor)?",
        "python -m bench.micro.upstream_client [--instructions]",
        "upstream-client.md",
    ),
    Benchmark(
        "pages/runs_list.py",
        "Does the dashboard's runs list answer under 200 ms at 1,000,000 runs, free-text search "
        "included?",
        "python -m bench.pages.runs_list",
        "runs-list.md",
    ),
    Benchmark(
        "pages/spend.py",
        "How fast are the Spend page and beat's rollup refresh at 1,000,000 runs?",
        "python -m bench.pages.spend",
        "spend.md",
    ),
    Benchmark(
        "scale/",
        "At 10,000,000 runs and 100,000,000 chunks over 60 days, with the writer storing 20,000 "
        "rows/s: do the runs list, search and each filter answer in 200 ms (p95), a run's page "
        "in 100 ms, Spend over 30 days in 1 s, replay's first byte in 50 ms; does dropping a day "
        "take under a second, does autovacuum keep up, does the writer keep its empty-store "
        "rows/s? `make bench-scale` runs it.",
        "python -m bench.scale [--runs 100000] [--keep]",
        "scale.md",
    ),
    Benchmark(
        "scale/wal.py",
        "What does storing a request cost Postgres — WAL bytes, CPU, bytes kept — for a "
        "non-streaming request and a 20-chunk stream (on a Postgres cluster of its own)?",
        "python -m bench.scale.wal",
        "wal.md",
    ),
    Benchmark(
        "soak.py",
        "Over ten minutes of streams without a pause, does Mortar's memory stay flat, and is "
        "every chunk its clients received stored?",
        "python -m bench.soak",
        "soak.md",
    ),
    Benchmark(
        "instructions.py",
        "How many instructions does a request cost, before and after a change (callgrind: "
        "steady where the clock is not)?",
        "python -m bench.instructions --baseline REF",
        "instructions.md",
    ),
    Benchmark(
        "harness/profile_summary.py",
        "Where does Mortar's time go under each load (py-spy)?",
        "bench/run.py --profile[-only]",
        "profile-*.svg, profile-summary.md",
    ),
)


def epilog() -> str:
    """The benchmarks as `--help` lists them."""
    lines = [
        "Beside the harness (run each from the repository's root with .venv/bin/python;",
        "the latest run of each is in bench/results/):",
        "",
    ]
    for benchmark in BENCHMARKS:
        lines.append(f"  bench/{benchmark.path}")
        lines += textwrap.wrap(
            benchmark.question, 88, initial_indent=" " * 4, subsequent_indent=" " * 4
        )
        lines.append(f"    {benchmark.command}  →  {benchmark.result}")
    return "\n".join(lines)
