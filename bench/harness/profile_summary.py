"""Summarize py-spy's raw (collapsed) profiles of Mortar by where the time goes.

Each working sample is charged to the first category (in priority order) that any frame of its
stack matches, so the shares add up to 100%; a stack matching none is "other". Waiting
(a worker thread idle on its queue, the writer thread waiting on Postgres) is split out, so
what remains is the work on Mortar's one core. `python -m bench load --profile` writes the
summary of the profiles it records to bench/results/profile-summary.md; by hand:

    .venv/bin/python -m bench profile-summary bench/results/profile-json-32.txt [...]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

from bench.commands import program

# (category, frame pattern), checked from the leaf up; the first frame that matches wins.
WAITS = [
    ("wait: idle worker thread (queue.get)", r"^_worker \(concurrent/futures/thread\.py:81\)"),
    ("wait: writer thread on Postgres I/O", r"^Connection\.wait \(psycopg/"),
    ("wait: event loop blocked starting a thread", r"^Condition\.wait .*|^Event\.wait"),
    ("wait: joining a finished request's thread", r"^Thread\._wait_for_tstate_lock"),
]
# (category, frame pattern), in priority order: a working sample is charged to the first
# category any frame of its stack matches, so app-level call sites win over the libraries they
# call (the writer's psycopg time is the writer's; the ORM's thread hop is the ORM's).
# Module paths before the layered layout (0424ba7: gateway/streaming.py, gateway/pipelined.py,
# ...) stay as alternatives, so a profile of an older revision sums up too.
CATEGORIES = [
    (
        "per-request thread start/join (asgiref ThreadSensitiveContext)",
        r"ThreadSensitiveContext\.__aexit__|_adjust_thread_count|^Thread\.start \(",
    ),
    (
        "run writer (its thread: COPY / UPDATE batches)",
        r"telemetry/writer\.py|telemetry/spool\.py|telemetry/postgres_writes\.py"
        r"|telemetry/store/",
    ),
    (
        "spend control (budget holds and slices, rate limits)",
        r"gateway/pipeline/limits\.py|gateway/pipeline/budget\.py|gateway/budgets\.py"
        r"|gateway/budget_slices\.py|telemetry/services/budgets\.py|core/ratelimits\.py|billing/"
        r"|^(rate_admit|rate_count|_rate_args) \(core/backplane/redis\.py",
    ),
    (
        "ORM queries (key + catalog lookups, on worker threads)",
        r"django/db/models|django/db/backends",
    ),
    (
        "Django built-in middleware bodies (session, csrf, auth, messages, ...)",
        r"django/middleware/|django/contrib/(sessions|auth|messages)/",
    ),
    ("request_started / request_finished signals", r"django/dispatch/"),
    (
        "sync_to_async hops (asgiref + thread pool hand-offs)",
        r"asgiref/sync\.py|concurrent/futures/thread\.py",
    ),
    ("tokenizer (tiktoken)", r"tiktoken/|gateway/tokens\.py"),
    ("prompt optimizer (shadow)", r"gateway/optimizer/"),
    (
        "Messages: Anthropic's shapes in and out (validation, translation)",
        r"gateway/surfaces/messages/(?!api\.py)",
    ),
    (
        "validation + body parsing",
        r"gateway/contract/|gateway/pipeline/validate\.py|pydantic|gateway/validation\.py",
    ),
    (
        "live-generation registry (in memory; stop requests)",
        r"gateway/coordination/stop\.py|gateway/live\.py",
    ),
    (
        "telemetry events (pipelined Redis XADDs)",
        r"telemetry/events\.py|core/pipelined\.py|core/backplane/|gateway/pipelined\.py|hiredis",
    ),
    ("channel layer (dashboard group_send)", r"channels_redis|channels/layers"),
    (
        "upstream client (httpx, aiohttp, httpcore, anyio)",
        r"httpx/|httpcore/|httpx_sse/|h11/|anyio/|aiohttp/|httpx_aiohttp/",
    ),
    (
        "relay, chunk encoding, the run and its sink",
        r"gateway/relay/|gateway/generation/|gateway/upstream/|gateway/runs/"
        r"|gateway/surfaces/chat/(?!api\.py)"
        r"|telemetry/recording\.py"
        r"|gateway/streaming\.py|gateway/chunks\.py|gateway/forwarding\.py|gateway/upstream\.py",
    ),
    ("logging (uvicorn access log)", r"logging/|uvicorn/logging"),
    # Ahead of ninja: since 0424ba7 the API's dispatch calls the ninja operation, so ninja's
    # frames sit under every pipeline step; what the steps themselves cost is the pipeline's.
    (
        "request pipeline (the operation's steps: auth, accept, plan, finish)",
        r"gateway/pipeline/|gateway/api\.py|gateway/surfaces/\w+/api\.py|accounts/auth\.py"
        r"|gateway/catalog/|core/lookups\.py"
        r"|gateway/pipeline\.py",
    ),
    ("ninja routing", r"ninja/"),
    ("uvicorn + httptools protocol (and the socket writes it makes)", r"uvicorn/"),
    (
        "chat-completions ASGI endpoint",
        r"core/http/|gateway/chat_endpoint\.py|gateway/api_request\.py",
    ),
    ("Django ASGI handler, request/response objects", r"django/"),
    ("redis-py (other)", r"redis/"),
    ("psycopg (other)", r"psycopg/"),
    ("asyncio / uvloop loop", r"asyncio/|uvloop"),
]
LOOP_LEAF = re.compile(r"^Runner\.run \(asyncio/runners\.py")
CALL_SITES = [
    ("authenticate (ORM key lookup)", r"^authenticate \((accounts|gateway)/auth\.py"),
    (
        "model_resolve (ORM catalog lookup)",
        r"^model_resolve \(gateway/(catalog/)?selectors\.py",
    ),
    ("live.register / unregister", r"^LiveGenerations\.(register|unregister)"),
    ("open_stream (httpx send)", r"^open_stream \(gateway/upstream(/client)?\.py"),
    ("relay_chunks (per chunk)", r"^relay_chunks \(gateway/(generation/)?forwarding\.py"),
    ("SSE parsing", r"^(sse_data|EventData\.feed) \(gateway/upstream(/sse)?\.py"),
    ("optimize", r"^optimize \(gateway/optimizer"),
    ("plan (read/validate/resolve/optimize/count)", r"^plan \(gateway/pipeline(/plan)?\.py"),
    ("request_started/finished signals", r"^Signal\.asend|^Signal\.send \("),
    ("SyncToAsync.__call__ (hop set-up on the loop)", r"^SyncToAsync\.__call__"),
    ("telemetry publish + pipelined writes", r"^(Redis)?EventPublisher\.|^PipelinedConnection\."),
    ("RunWriter (all)", r"^RunWriter\."),
    ("Logger (access log)", r"^Logger\._log"),
]


def load(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def summarize(path: Path) -> str:
    stacks = load(path)
    total = sum(count for _, count in stacks)
    waits = [(name, re.compile(pattern)) for name, pattern in WAITS]
    categories = [(name, re.compile(pattern)) for name, pattern in CATEGORIES]
    charged: collections.Counter[str] = collections.Counter()
    waited: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        leaf = frames[-1]
        wait = next((name for name, rx in waits if rx.search(leaf)), None)
        if wait is not None:
            waited[wait] += count
            continue
        if LOOP_LEAF.search(leaf):
            # The loop's own C code (uvloop: epoll, socket reads and writes, callbacks) shows
            # as the Python frame that entered it; every main-thread stack has uvicorn at its
            # root, so without this it would be charged to uvicorn.
            charged["event loop internals (uvloop C: I/O, scheduling)"] += count
            continue
        category = next(
            (name for name, rx in categories if any(rx.search(frame) for frame in frames)),
            "other",
        )
        charged[category] += count
    busy = total - sum(waited.values())
    inclusive: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        if any(rx.search(frames[-1]) for _, rx in waits):
            continue
        for name, pattern in CALL_SITES:
            if any(re.search(pattern, frame) for frame in frames):
                inclusive[name] += count
    lines = [
        f"## {path.name}",
        "",
        f"{total} samples; {busy} working ({100 * busy / max(total, 1):.0f}%), the rest waiting.",
        "",
        "| Where the working samples go (exclusive, by priority) | share |",
        "| --- | ---: |",
    ]
    for name, count in charged.most_common():
        lines.append(f"| {name} | {100 * count / max(busy, 1):.1f}% |")
    lines += ["", "| Call site (inclusive, working samples) | share |", "| --- | ---: |"]
    for name, count in inclusive.most_common():
        lines.append(f"| {name} | {100 * count / max(busy, 1):.1f}% |")
    lines += ["", "| Waiting (share of all samples) | share |", "| --- | ---: |"]
    for name, count in waited.most_common():
        lines.append(f"| {name} | {100 * count / max(total, 1):.1f}% |")
    return "\n".join(lines) + "\n"


def summaries(paths: list[Path]) -> str:
    """The summary of each profile, one section each."""
    return "\n".join(summarize(path) for path in paths)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="+", type=Path)
    args = parser.parse_args(argv)
    sys.stdout.write(summaries(args.profiles))
