"""Where in a slow-stream run the long gaps fall: read the gap logs `loadgen.py slow` writes
with `--gap-log DIR` (or `LOADGEN_GAP_LOG=DIR` in `bench/run.py`'s environment) and print, per
log, the gap p99 second by second, how many streams got their first token in each second, and
the gaps before and after the last stream's first token (the streams still opening, and all of
them open).

    LOADGEN_GAP_LOG=/tmp/gaps .venv/bin/python bench/run.py --scenarios slow-1000 ...
    .venv/bin/python bench/gap_log.py /tmp/gaps/*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def summary(log: dict[str, Any]) -> dict[str, Any]:
    gaps: list[tuple[float, float]] = [(t, gap) for t, gap in log["gaps"]]
    first_tokens = [first for _, first in log["streams"] if first is not None]
    last_open = max(first_tokens, default=0.0)
    seconds = int(max((t for t, _ in gaps), default=0.0)) + 1
    by_second: list[list[float]] = [[] for _ in range(seconds)]
    for t, gap in gaps:
        by_second[int(t)].append(gap)
    opened = [0] * seconds
    for first in first_tokens:
        opened[min(int(first), seconds - 1)] += 1
    opening = [gap for t, gap in gaps if t <= last_open]
    all_open = [gap for t, gap in gaps if t > last_open]
    return {
        "url": log["url"],
        "last_first_token_s": round(last_open, 2),
        "gap_p99_ms_by_second": [round(quantile(g, 0.99) * 1000) for g in by_second],
        "packets_by_second": [len(g) for g in by_second],
        "first_tokens_by_second": opened,
        "while_opening": _gaps(opening),
        "all_open": _gaps(all_open),
    }


def _gaps(gaps: list[float]) -> dict[str, float | int]:
    return {
        "n": len(gaps),
        "p50_ms": round(quantile(gaps, 0.5) * 1000, 1),
        "p99_ms": round(quantile(gaps, 0.99) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    args = parser.parse_args()
    for path in sorted(args.logs, key=lambda p: p.stat().st_mtime):
        found = summary(json.loads(path.read_text()))
        print(f"{path.name} ({found['url']})")
        print(f"  gap p99 ms, second by second: {found['gap_p99_ms_by_second']}")
        print(f"  packets with tokens a second: {found['packets_by_second']}")
        print(f"  first tokens a second:        {found['first_tokens_by_second']}")
        opening, all_open = found["while_opening"], found["all_open"]
        print(
            f"  last first token at {found['last_first_token_s']} s; gaps until then: "
            f"{opening['n']}, p50 {opening['p50_ms']} p99 {opening['p99_ms']} ms; after: "
            f"{all_open['n']}, p50 {all_open['p50_ms']} p99 {all_open['p99_ms']} ms"
        )


if __name__ == "__main__":
    main()
