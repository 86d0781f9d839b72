"""Every command of `python -m bench`: the question it answers, the module whose `main(argv)`
runs it and where its latest run is kept; `python -m bench --help` prints them."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

ENTRY = "python -m bench"


@dataclass(frozen=True)
class Command:
    name: str  # what follows `python -m bench`: one word, or a group's and its own
    module: str  # whose `main(argv)` runs it, given the arguments after the name
    question: str
    options: str = ""  # the ones worth knowing; `--help` lists them all
    result: str = ""  # under bench/results/
    internal: bool = False  # started by another command, not by hand

    @property
    def words(self) -> list[str]:
        return self.name.split()

    @property
    def usage(self) -> str:
        return f"{ENTRY} {self.name}" + (f" {self.options}" if self.options else "")


COMMANDS = (
    Command(
        "load",
        "bench.harness.cli",
        "What does Mortar cost a request beside the mock model server alone and the LiteLLM "
        "proxy, on chat completions and Messages, with one worker and with two (and with "
        "--baseline REF, before and after a change)? `make bench` runs it.",
        "[--quick] [--baseline REF] [--no-litellm] [--no-scaling] [--scenarios A,B] [--profile] "
        "[--render JSON]",
        "latest.md, latest.json",
    ),
    Command(
        "micro chunk-bytes",
        "bench.micro.chunk_bytes",
        "How many bytes does the run store keep per streamed chunk (table, indexes, TOAST), and "
        "what did a schema change save?",
        "[--baseline DIR]",
        "chunk-bytes.md",
    ),
    Command(
        "micro chunklog",
        "bench.micro.chunklog",
        "What does the crash log cost a chunk appended (budget 2 µs)? `make bench` runs it after "
        "the load comparison.",
        "[--chunks 300000]",
        "chunklog.md",
    ),
    Command(
        "micro writer",
        "bench.micro.writer.writer_bench",
        "How many chunk rows a second does the run writer store (target 50,000), at what CPU a "
        "row and a run, its own and Postgres's, with memory flat; does a spooled backlog drain?",
        "[--soak 600]",
        "writer.md",
    ),
    Command(
        "micro spend-control",
        "bench.micro.spend_control",
        "What do the budget hold and the rate limits cost a request in Mortar's process "
        "(budget 0.15 ms)?",
        "[--requests 3000]",
        "spend-control.md",
    ),
    Command(
        "micro settle",
        "bench.micro.settle",
        "What does settling a request's budget hold when its response ends cost Mortar's "
        "process (budget 0.05 ms under load)? `make bench` runs it after the load comparison.",
        "[--requests 2000]",
        "settle.md",
    ),
    Command(
        "micro telemetry-events",
        "bench.micro.telemetry_events",
        "What do a request's telemetry events (XADDs to Redis) and the live registry cost "
        "Mortar's process?",
        "[--dashboard]",
        "telemetry-events.md",
    ),
    Command(
        "micro observe",
        "bench.micro.observe",
        "What do the metrics (budget 50 µs), the JSON log line, tracing when off and CORS cost "
        "a request?",
        "[--requests 100000]",
        "observe.md",
    ),
    Command(
        "micro validation",
        "bench.micro.validation",
        "What does validating a request cost, on chat completions and on Messages?",
        "[--rounds 15]",
        "validation.md",
    ),
    Command(
        "micro optimizer",
        "bench.micro.optimizer",
        "How long does the prompt optimizer take on a 200 KB agent prompt (median < 5 ms)?",
        "[--iterations 300]",
        "optimizer.md",
    ),
    Command(
        "micro upstream-client",
        "bench.micro.upstream_client",
        "What does a request to a model server cost Mortar's client, beside httpx's own "
        "transport and aiohttp alone (the floor)?",
        "[--instructions]",
        "upstream-client.md",
    ),
    Command(
        "micro day-or-week",
        "bench.micro.day_or_week",
        "What do planning and running the run store's usual queries cost over 63 day partitions, "
        "against 9 week partitions of the same 1,000,000 rows?",
        "[DATABASE_URL]",
        "day-or-week.md (written from what it prints)",
    ),
    Command(
        "pages runs-list",
        "bench.pages.runs_list",
        "Does the dashboard's runs list answer under 200 ms at 1,000,000 runs, free-text search "
        "included?",
        "[--reseed]",
        "runs-list.md",
    ),
    Command(
        "pages spend",
        "bench.pages.spend",
        "How fast are the Spend page and beat's rollup refresh at 1,000,000 runs?",
        "[--reseed]",
        "spend.md",
    ),
    Command(
        "scale",
        "bench.scale.scale_bench",
        "At 10,000,000 runs and 100,000,000 chunks over 60 days, with the writer storing 20,000 "
        "rows/s: do the runs list, search and each filter answer in 200 ms (p95), a run's page "
        "in 100 ms, Spend over 30 days in 1 s, replay's first byte in 50 ms; does dropping a day "
        "take under a second, does autovacuum keep up, does the writer keep its empty-store "
        "rows/s? `make bench-scale` runs it.",
        "[--runs 100000] [--keep] [--drop]",
        "scale.md",
    ),
    Command(
        "wal",
        "bench.scale.wal",
        "What does storing a request cost Postgres — WAL bytes, CPU, bytes kept — for a "
        "non-streaming request and a 20-chunk stream (on a Postgres cluster of its own)?",
        "[--requests 6000]",
        "wal.md",
    ),
    Command(
        "soak",
        "bench.soak",
        "Over ten minutes of streams without a pause, does Mortar's memory stay flat, and is "
        "every chunk its clients received stored?",
        "[--minutes 10]",
        "soak.md, soak.json",
    ),
    Command(
        "instructions",
        "bench.instructions",
        "How many instructions does a request cost, before and after a change (callgrind: "
        "steady where the clock is not)?",
        "--baseline REF",
        "instructions.md, instructions.json",
    ),
    Command(
        "profile-summary",
        "bench.harness.profile_summary",
        "Where does Mortar's time go under each load (py-spy)? `load --profile[-only]` records "
        "the profiles and sums them up; this sums up the ones given.",
        "PROFILE.txt [...]",
        "profile-summary.md, profile-*.svg",
    ),
    Command(
        "loadgen",
        "bench.harness.loadgen.loadgen_cli",
        "The load generator `load` starts on the load core for what wrk cannot measure: the gaps "
        "between a slow stream's chunks, one connection's latency.",
        "slow|latency --url URL --body-file FILE",
        internal=True,
    ),
    Command(
        "scale-writer",
        "bench.scale.writer_load",
        "The run writer in a process of its own that `scale` starts: a steady rate of rows "
        "while the pages are timed, or a timed burst.",
        "--rate ROWS_PER_S | --burst STREAMS --report FILE",
        internal=True,
    ),
)
GROUPS = sorted({c.words[0] for c in COMMANDS if len(c.words) > 1})


def program(module: str) -> str:
    """The start of a module's usage line: `python -m bench` and its command's name."""
    return next(f"{ENTRY} {c.name}" for c in COMMANDS if c.module == module)


def listing(commands: list[Command]) -> str:
    lines: list[str] = []
    for command in commands:
        result = f"  →  {command.result}" if command.result else ""
        lines += [
            f"  {command.name}",
            *_wrapped(command.question, indent=4),
            *_wrapped(command.usage + result, indent=4, then=8),
        ]
    return "\n".join(lines)


def _wrapped(text: str, *, indent: int, then: int | None = None) -> list[str]:
    return textwrap.wrap(
        text,
        92,
        initial_indent=" " * indent,
        subsequent_indent=" " * (then or indent),
        break_on_hyphens=False,
        break_long_words=False,
    )


def overview(group: str | None = None) -> str:
    """The commands as `--help` lists them: all of them, or one group's."""
    chosen = [c for c in COMMANDS if group is None or c.words[0] == group]
    lines = [
        f"usage: {ENTRY} {group or 'COMMAND'}{' NAME' if group else ''} [OPTIONS]",
        "",
        "Mortar's benchmarks, one command each, with the question it answers. Run them from",
        f"the repository's root with .venv/bin/python; `{ENTRY} COMMAND --help` lists a",
        "command's options. The latest run of each is in bench/results/ (the file after →).",
        "",
        listing([c for c in chosen if not c.internal]),
    ]
    internal = [c for c in chosen if c.internal]
    if internal:
        lines += ["", "Started by the commands above, not by hand:", "", listing(internal)]
    return "\n".join(lines)


def run(argv: list[str]) -> None:
    """Run the command `argv` names with the rest of `argv`; or print the commands."""
    group = argv[0] if argv and argv[0] in GROUPS else None
    named = argv[1:] if group else argv
    if not named or named[0] in ("-h", "--help"):
        # Nothing named is a usage error, as argparse's; `--help` asked for is not one.
        print(overview(group), file=sys.stdout if named else sys.stderr)
        raise SystemExit(0 if named else 2)
    command = next((c for c in COMMANDS if argv[: len(c.words)] == c.words), None)
    if command is None:
        wrong = " ".join(argv[:2] if group else argv[:1])
        print(f"{ENTRY}: no command {wrong!r}; `{ENTRY} --help` lists them", file=sys.stderr)
        raise SystemExit(2)
    main: Callable[[list[str]], None] = importlib.import_module(command.module).main
    main(argv[len(command.words) :])
