"""Time the prompt optimizer on a ~200 KB agent prompt with 50 tool results.

The prompt mixes what agents send back: pretty-printed JSON API responses, prose with ```json
fenced blocks, and column-aligned tables, each answering an assistant tool call whose
arguments are pretty-printed JSON. The optimizer runs in ``on`` mode with every pass; the
target is a median ``elapsed_us`` under 5 ms (the run fails above it).

    .venv/bin/python -m bench micro optimizer [--iterations N]

Writes bench/results/optimizer.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from typing import Any

from bench.commands import program
from bench.harness.results import recorded
from bench.harness.stats import percentile
from gateway.optimizer import OptimizerReport, optimize

TARGET_MEDIAN_US = 5_000
TOOL_RESULTS = 50
WORDS = (
    *("deploy", "cache", "replica", "token", "stream", "budget", "shard", "queue", "retry"),
    *("latency", "région", "café", "naïve", "timeout", "upstream", "gateway", "tenant"),
    *("session", "worker", "quota", "東京", "metrics"),
)


def _sentence(rng: random.Random, words: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def _record(rng: random.Random, index: int) -> dict[str, Any]:
    return {
        "id": index,
        "title": _sentence(rng, 6),
        "state": rng.choice(["open", "closed"]),
        "score": round(rng.uniform(0, 100), 3),
        "ratio": rng.choice([1.0, 0.5, 1e-3, 2.50]),
        "labels": [rng.choice(WORDS) for _ in range(rng.randint(0, 4))],
        "author": {"login": f"user{rng.randint(1, 999)}", "admin": rng.random() < 0.1},
        "body": _sentence(rng, 20) if rng.random() < 0.5 else None,
    }


def pretty_json_result(rng: random.Random) -> str:
    records = [_record(rng, i) for i in range(11)]
    return json.dumps({"total": len(records), "items": records}, indent=2, ensure_ascii=False)


def fenced_result(rng: random.Random) -> str:
    parts = []
    for _ in range(3):
        parts.append(_sentence(rng, 25))
        block = [_record(rng, i) for i in range(rng.randint(2, 4))]
        parts.append("```json\n" + json.dumps(block, indent=4, ensure_ascii=False) + "\n```")
    parts.append(_sentence(rng, 15))
    return "\n\n".join(parts) + "\n"


def table_result(rng: random.Random) -> str:
    header = ("NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE")
    rows = [
        (
            f"{rng.choice(WORDS)}-{rng.randint(1000, 9999)}-{rng.randint(10, 99)}",
            f"{rng.randint(0, 3)}/3",
            rng.choice(["Running", "Pending", "CrashLoopBackOff", "Completed"]),
            str(rng.randint(0, 40)),
            f"{rng.randint(1, 90)}d",
            f"node-{rng.randint(1, 12)}.cluster.internal",
        )
        for _ in range(36)
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) + 3 for i in range(len(header))]
    lines = [
        "".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    return "\n".join(lines) + "\n"


def agent_prompt(seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    makers = [pretty_json_result, fenced_result, table_result]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an operations agent. " + _sentence(rng, 40)},
        {"role": "user", "content": "Find out why the checkout service is slow."},
    ]
    for i in range(TOOL_RESULTS):
        call_id = f"call_{i:03d}"
        arguments = {"query": _sentence(rng, 5), "limit": 50, "filters": {"state": "open"}}
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "search",
                            "arguments": json.dumps(arguments, indent=2),
                        },
                    }
                ],
            }
        )
        content = makers[i % len(makers)](rng)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return messages


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args(argv)

    messages = agent_prompt()

    def run() -> OptimizerReport:
        _, report = optimize(
            messages,
            deployment_mode="on",
            organization_default="on",
            requested=("json-tool-blocks", "collapse-spaces"),
        )
        return report

    for _ in range(10):  # warm up: regex caches, allocator
        run()
    elapsed = []
    report = None
    for _ in range(args.iterations):
        report = run()
        elapsed.append(report.elapsed_us)
    assert report is not None

    elapsed.sort()
    median = statistics.median(elapsed)
    tool_results = sum(1 for m in messages if m["role"] == "tool")
    with recorded("optimizer", "The prompt optimizer on a ~200 KB agent prompt"):
        print(
            f"prompt: {len(messages)} messages, {tool_results} tool results, {report.bytes} bytes"
        )
        print(f"saved: {report.saved} bytes ({100 * report.saved / report.bytes:.1f}%)")
        print(f"passes: {', '.join(f'{name}/{count}' for name, count in report.passes)}")
        print(
            f"elapsed_us over {args.iterations} runs: median {median:.0f}, "
            f"p95 {percentile(elapsed, 95):.0f}, min {elapsed[0]}, max {elapsed[-1]}"
        )
        print(f"header: {report.header()}")
        ok = median < TARGET_MEDIAN_US
        print(f"target median < {TARGET_MEDIAN_US} us: {'met' if ok else 'MISSED'}")
    if not ok:
        sys.exit(1)
