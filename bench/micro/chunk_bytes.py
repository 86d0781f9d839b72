"""Bytes per stored chunk: the chunk table's heap, indexes and TOAST over the chunks of 20-chunk
streams, written by the run writer's own COPY, after VACUUM.

`python -m bench micro chunk-bytes [--baseline DIR]` measures the working tree, and with
`--baseline` the same in another checkout (`git archive <commit> | tar -x -C DIR`), each in a
database of its own that it migrates and drops; it writes bench/results/chunk-bytes.md.

The events are those of a chat completion stream (~190 bytes: the id, model, one word of
content), 20 a run, the last `data: [DONE]`. Only what the schema decides differs between two
trees: the rows, the script and the data are the same.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

# For the type checker only: the checkout `_in_tree` loads this file in may name them otherwise.
if TYPE_CHECKING:
    from telemetry.store.fields import RunFields
    from telemetry.store.items import Chunk

ROOT = Path(__file__).resolve().parents[2]
SERVER = "postgres://postgres@127.0.0.1:5432"
RESULT = ROOT / "bench" / "results" / "chunk-bytes.md"


class Sizes(TypedDict):
    """The chunks written, their events' average length, and the chunk table's bytes."""

    chunks: int
    event_bytes: float
    heap: int
    indexes: int
    toast_and_maps: int
    total: int


def _event(run_id: str, seq: int, chunks: int) -> bytes:
    if seq == chunks - 1:
        return b"data: [DONE]\n\n"
    chunk = {
        "id": run_id,
        "object": "chat.completion.chunk",
        "created": 1765065600,
        "model": "mock-model",
        "choices": [
            {
                "index": 0,
                "delta": {"content": f" word{seq}"},
                "logprobs": None,
                "finish_reason": "stop" if seq == chunks - 2 else None,
            }
        ],
    }
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def measure(runs: int, chunks: int, database: str) -> Sizes:
    """Fill a fresh database with `runs` streams through the run writer; the chunk table's size."""
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}"')
        admin.execute(f'CREATE DATABASE "{database}"')
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"{SERVER}/{database}",
        SECRET_KEY="chunk-bytes-bench-only",
        LOG_LEVEL="ERROR",
    )
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from accounts.models import Organization
    from telemetry.store import postgres

    try:
        call_command("migrate", verbosity=0)
        organization = Organization.objects.create(name="chunk-bytes")
        start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        written = 0
        for first in range(0, runs, 500):
            new_runs: list[RunFields] = []
            rows: list[Chunk] = []
            for n in range(first, min(first + 500, runs)):
                run_id = f"chatcmpl-{n:024x}"
                new_runs.append(
                    {
                        "id": run_id,
                        "accepted_at": start + timedelta(seconds=n),
                        "organization_id": organization.id,
                        "status": "completed",
                        "stream": True,
                    }
                )
                rows.extend(
                    (run_id, seq, 1000 * (seq + 1), _event(run_id, seq, chunks))
                    for seq in range(chunks)
                )
            connection.ensure_connection()
            with transaction.atomic():
                postgres.write(
                    connection.connection,
                    new_runs=new_runs,
                    chunks=rows,
                    updates={},
                    replay=False,
                )
            written += len(rows)
        connection.close()
        with psycopg.connect(f"{SERVER}/{database}", autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE telemetry_runchunk")
            leaves = [
                name
                for (name,) in conn.execute(
                    "SELECT relid::regclass::text FROM pg_partition_tree('telemetry_runchunk')"
                    " WHERE isleaf"
                ).fetchall()
            ] or ["telemetry_runchunk"]
            heap = indexes = total = 0
            for leaf in leaves:
                sizes = conn.execute(
                    "SELECT pg_relation_size(%s), pg_indexes_size(%s), pg_total_relation_size(%s)",
                    [leaf, leaf, leaf],
                ).fetchone()
                assert sizes is not None
                h, i, t = sizes
                heap, indexes, total = heap + h, indexes + i, total + t
            average = conn.execute(
                "SELECT avg(length(data))::float FROM telemetry_runchunk"
            ).fetchone()
            assert average is not None
            data: float = average[0]
        return {
            "chunks": written,
            "event_bytes": data,
            "heap": heap,
            "indexes": indexes,
            "toast_and_maps": total - heap - indexes,
            "total": total,
        }
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}"')


# This file's `measure`, loaded by its path: the other checkout's own bench/ may predate it.
MEASURE_BY_PATH = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("chunk_bytes", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps(module.measure(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])))
"""


def _in_tree(tree: Path, runs: int, chunks: int, database: str) -> Sizes:
    """`measure` run in a checkout: its Mortar, this file's measuring."""
    output = subprocess.run(
        [sys.executable, "-c", MEASURE_BY_PATH, __file__, str(runs), str(chunks), database],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    sizes: Sizes = json.loads(output.strip().splitlines()[-1])
    return sizes


def _line(label: str, m: Sizes) -> str:
    chunks = m["chunks"]
    return (
        f"| {label} | {chunks:,} | {m['event_bytes']:.0f} B | {m['heap'] / chunks:.0f} B"
        f" | {m['indexes'] / chunks:.0f} B | {m['toast_and_maps'] / chunks:.1f} B"
        f" | **{m['total'] / chunks:.0f} B** |"
    )


def _baseline_arguments(args: argparse.Namespace) -> str:
    if not args.baseline:
        return ""
    label = f" --baseline-label {args.baseline_label}" if args.baseline_label else ""
    return f" --baseline DIR{label}"


def main(argv: list[str]) -> None:
    # Not at the top: the checkout `_in_tree` loads this file in may have no bench.commands.
    from bench.commands import program

    parser = argparse.ArgumentParser(
        prog=program(__name__), description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--baseline-label", help="what the baseline is (its commit)")
    args = parser.parse_args(argv)
    lines = []
    if args.baseline:
        baseline = _in_tree(args.baseline, args.runs, args.chunks, "mortar_chunk_bytes_before")
        lines.append(_line(f"before ({args.baseline_label or args.baseline})", baseline))
    after = _in_tree(ROOT, args.runs, args.chunks, "mortar_chunk_bytes_after")
    lines.append(_line("this tree", after))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    text = "\n".join(
        [
            "# Bytes per stored chunk",
            "",
            f"`python -m bench micro chunk-bytes{_baseline_arguments(args)}`,"
            f" {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Mortar {commit}: {args.runs:,} streams of"
            f" {args.chunks} chunks written by the run writer's COPY, after `VACUUM ANALYZE`;"
            " the chunk table's bytes (every partition's) divided by its rows.",
            "",
            "| tree | chunks | event (avg) | heap | indexes | TOAST, maps | total a chunk |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            *lines,
            "",
        ]
    )
    print(text)
    RESULT.write_text(text)
