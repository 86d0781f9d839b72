"""Summarize what bench/tailprobe/sitecustomize.py recorded: where a server's slowest requests
fall against its run writer's batches, and what the event loop's thread did meanwhile.

    .venv/bin/python bench/tailprobe/analyze.py DIR [--slowest 0.02]

Reads every `tail-*.jsonl` in DIR (one server process each; run one measurement at a time).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import statistics
from pathlib import Path


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


class Spans:
    """Time spans (start, length), sorted, asked whether they overlap an interval."""

    def __init__(self, spans: list[tuple[float, float]]) -> None:
        self.spans = sorted(spans)
        self.starts = [start for start, _ in self.spans]
        self.longest = max((length for _, length in self.spans), default=0.0)

    def overlap(self, start: float, length: float) -> bool:
        end = start + length
        first = bisect.bisect_left(self.starts, start - self.longest)
        last = bisect.bisect_right(self.starts, end)
        return any(s < end and s + n > start for s, n in self.spans[first:last])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--slowest", type=float, default=0.02, help="share of requests")
    args = parser.parse_args()
    events: dict[str, list[list[float]]] = collections.defaultdict(list)
    for path in sorted(args.directory.glob("tail-*.jsonl")):
        for line in path.read_text().splitlines():
            kind, *fields = json.loads(line)
            events[kind].append(fields)
    requests = sorted(events["req"])
    batches = sorted(events["batch"])
    lags = sorted(events["lag"])
    if not requests:
        raise SystemExit(f"no requests recorded in {args.directory}")
    first, last = requests[0][0], requests[-1][0] + requests[-1][1]
    batches = [b for b in batches if first <= b[0] <= last]
    in_batch = Spans([(b[0], b[1]) for b in batches])
    lagging = Spans([(lag[0], lag[1] + 0.005) for lag in lags])

    seconds = [r[1] for r in requests]
    print(f"{len(requests):,} requests over {last - first:.1f} s, server side (ms):")
    print(
        f"  p50 {ms(percentile(seconds, 0.5))}, p90 {ms(percentile(seconds, 0.9))},"
        f" p99 {ms(percentile(seconds, 0.99))}, p999 {ms(percentile(seconds, 0.999))}"
    )
    if batches:
        covered = sum(b[1] for b in batches) / (last - first)
        cores = collections.Counter(int(b[6]) for b in batches)
        print(
            f"{len(batches)} writer batches, covering {covered:.0%} of the time; medians:"
            f" {ms(statistics.median(b[1] for b in batches))} ms long,"
            f" {statistics.median(b[3] for b in batches):.0f} rows,"
            f" writer thread CPU {ms(statistics.median(b[2] for b in batches))} ms,"
            f" Postgres CPU {ms(statistics.median(b[4] for b in batches))} ms"
            f" (runnable but waiting {ms(statistics.median(b[5] for b in batches))} ms),"
            f" Postgres last on core {dict(sorted(cores.items()))}"
        )
    threshold = percentile(seconds, 1 - args.slowest)
    median = percentile(seconds, 0.5)
    groups = {
        f"slowest {args.slowest:.0%}": [r for r in requests if r[1] >= threshold],
        "faster than the median": [r for r in requests if r[1] < median],
    }
    print(
        "| requests | n | in a writer batch | in a loop lag | median ms | to response start"
        " | loop thread CPU | loop thread waiting for a core |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, group in groups.items():
        overlapping = sum(in_batch.overlap(r[0], r[1]) for r in group) / len(group)
        lagged = sum(lagging.overlap(r[0], r[1]) for r in group) / len(group)
        print(
            f"| {name} | {len(group):,} | {overlapping:.0%} | {lagged:.0%}"
            f" | {ms(statistics.median(r[1] for r in group))}"
            f" | {ms(statistics.median(r[2] for r in group))}"
            f" | {ms(statistics.median(r[3] for r in group))}"
            f" | {ms(statistics.median(r[4] for r in group))}"
            f" (mean {ms(statistics.mean(r[4] for r in group))}) |"
        )
    inside = [r[1] for r in requests if in_batch.overlap(r[0], r[1])]
    outside = [r[1] for r in requests if not in_batch.overlap(r[0], r[1])]
    for name, group in (("during a writer batch", inside), ("outside the batches", outside)):
        if group:
            print(
                f"requests {name}: {len(group):,}, p50 {ms(percentile(group, 0.5))} ms,"
                f" p99 {ms(percentile(group, 0.99))} ms"
            )
    if lags:
        late = sorted(lag[1] for lag in lags)
        print(
            f"{len(lags)} loop lags over 1.5 ms, the largest (ms): "
            + ", ".join(ms(x) for x in late[-8:])
        )


if __name__ == "__main__":
    main()
