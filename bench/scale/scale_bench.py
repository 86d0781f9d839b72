"""`python -m bench scale`: its flags, the fill, the measurements and the report (the package's
docstring says what each is)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

import psycopg

from bench.commands import program
from bench.harness.results import recorded

from . import __doc__ as package_doc
from . import database

if TYPE_CHECKING:
    from .database import Layout, TableBytes
    from .fill import Plan
    from .page_timings import Timed
    from .upkeep import Dropped, VacuumState
    from .writer_load import SteadyReport

GB = 1e9


class Meta(TypedDict, total=False):
    """What the fill leaves in its database (bench_scale_meta), for `--keep` to measure again."""

    empty_writer: list[float]  # the writer's rows/s on the empty store, before the fill
    runs: int
    days: int
    chunks_per_run: float
    end: str
    filled: dict[str, float]  # fill.Filled's fields
    rollup_seconds: float


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog=program(__name__), description=(package_doc or "").splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=10_000_000)
    parser.add_argument("--chunks-per-run", type=float, default=10.0, help="on average")
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=2, help="days filled at once")
    parser.add_argument(
        "--indexes",
        choices=("after", "on"),
        default="after",
        help="build the indexes after the fill (default) or keep them on during it",
    )
    parser.add_argument(
        "--keep", action="store_true", help="measure the database filled before, without refilling"
    )
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    parser.add_argument("--samples", type=int, default=30, help="tries of each page")
    parser.add_argument("--rate", type=int, default=20_000, help="writer rows/s while measuring")
    parser.add_argument("--burst", type=int, default=10_000, help="streams in a writer burst")
    parser.add_argument("--min-free-gb", type=float, default=10.0)
    parser.add_argument(
        "--no-autovacuum",
        action="store_true",
        help="leave the server's autovacuum setting as it is (else on while measuring)",
    )
    args = parser.parse_args(argv)
    with recorded("scale", f"The run store at scale: {args.runs:,} runs over {args.days} days"):
        run(args)
    if args.drop:
        database.drop()


def run(args: argparse.Namespace) -> None:
    from . import fill, page_timings, upkeep

    print(f"host: {os.cpu_count()} CPUs, load average {_load()} at start", flush=True)
    kept = args.keep and database.exists()
    if not kept:
        free = database.disk_free_bytes()
        print(f"{free / GB:.1f} GB free on disk before the fill", flush=True)
        database.create_fresh()
    database.setup_django()
    with database.connect() as conn:
        layout = database.layout(conn)
        meta: Meta = _meta(conn) if kept else {}
    print(f"database {database.NAME}: {'day partitions' if layout.partitioned else 'plain tables'}")
    if not kept:
        fill.owners()
        print("writer on the empty store:", flush=True)
        meta["empty_writer"] = upkeep.writer_burst(args.burst, 3)
        print(f"  rows/s: {_rates(meta['empty_writer'])}", flush=True)
        the_plan = fill.plan(args.runs, args.days, args.chunks_per_run)
        ensure = None
        if layout.partitioned:
            from telemetry.store.partitions import ensure_partitions

            ensure = ensure_partitions
        print(
            f"filling {args.runs:,} runs, {args.chunks_per_run:g} chunks a run on average,"
            f" over {args.days} days ending {the_plan.end:%Y-%m-%d}, {args.jobs} days at once,"
            f" indexes {args.indexes}",
            flush=True,
        )
        filled = fill.fill(
            the_plan,
            jobs=args.jobs,
            indexes_after=args.indexes == "after",
            ensure_days=ensure,
            min_free_bytes=int(args.min_free_gb * GB),
        )
        print(
            f"filled {filled.runs:,} runs and {filled.chunks:,} chunks in {filled.seconds:.0f} s"
            f" ({(filled.runs + filled.chunks) / filled.seconds:,.0f} rows/s), indexes built in"
            f" {filled.index_seconds:.0f} s; load average {_load()}",
            flush=True,
        )
        rollup_s = page_timings.roll_up(31)
        print(f"rollups and breakdowns of the last 31 days (beat's): {rollup_s:.0f} s", flush=True)
        meta |= {
            "runs": args.runs,
            "days": args.days,
            "chunks_per_run": args.chunks_per_run,
            "end": the_plan.end.isoformat(),
            "filled": asdict(filled),
            "rollup_seconds": rollup_s,
        }
        with database.connect() as conn:
            _save_meta(conn, meta)
    the_plan = fill.Plan(
        runs=meta["runs"],
        days=meta["days"],
        chunks_per_run=meta["chunks_per_run"],
        end=datetime.fromisoformat(meta["end"]),
    )
    measure(args, the_plan, meta, layout)


def measure(args: argparse.Namespace, the_plan: Plan, meta: Meta, layout: Layout) -> None:
    from . import page_timings, replay_ttfb, upkeep

    with database.connect() as conn:
        sizes = [database.table_bytes(conn, t) for t in (database.RUN_TABLE, database.CHUNK_TABLE)]
        db_bytes = database.database_bytes(conn)
    print("\nthe store:")
    for size in sizes:
        print(
            f"  {size.table:<20} {size.rows:>13,} rows  heap {size.heap / GB:6.2f} GB"
            f"  indexes {size.indexes / GB:6.2f} GB  {size.total / max(size.rows, 1):6.0f} B/row",
            flush=True,
        )
    runs, chunks = sizes
    stream_bytes = runs.total / max(runs.rows, 1) + 20 * chunks.total / max(chunks.rows, 1)
    print(
        f"  database {db_bytes / GB:.2f} GB; {database.disk_free_bytes() / GB:.1f} GB free on"
        f" disk; a stream of 20 chunks stores {stream_bytes / 1e3:.1f} kB",
        flush=True,
    )

    with database.connect() as conn:
        if not args.no_autovacuum:
            # On before the full store's writer is timed: its first passes over the server's
            # other databases are over by the time the pages are.
            upkeep.set_autovacuum(conn, True)
        try:
            print("\nwriter on the full store (no other load):", flush=True)
            full_rates = upkeep.writer_burst(args.burst, 3)
            print(f"  rows/s: {_rates(full_rates)}", flush=True)
            before = upkeep.vacuum_state(conn)
            client = page_timings.staff_client()
            print(
                f"\nwith the writer at {args.rate:,} rows/s in its own process"
                f" (autovacuum {'on' if before.autovacuum_on else 'off'}):",
                flush=True,
            )
            with upkeep.SteadyWriter(args.rate) as writer:
                timed = page_timings.measure_runs_list(the_plan, args.samples, client)
                timed.append(page_timings.measure_run_page(args.samples, client))
                timed += page_timings.measure_spend(max(args.samples // 3, 5), client)
                timed.append(replay_ttfb.measure_replay(args.samples))
                page_timings.beat_refresh()
                oldest = (the_plan.end - timedelta(days=the_plan.days)).date()
                dropped = upkeep.drop_oldest_day(conn, oldest)
                print(
                    f"  drop the oldest day ({dropped.how}): {dropped.seconds:.2f} s"
                    f" [{dropped.what}]",
                    flush=True,
                )
                after = upkeep.vacuum_state(conn)
        finally:
            if not args.no_autovacuum:
                upkeep.set_autovacuum(conn, None)
    empty = statistics.median(meta["empty_writer"]) if meta.get("empty_writer") else 0.0
    full = statistics.median(full_rates)
    steady = writer.result
    report(args, meta, sizes, timed, dropped, before, after, steady, empty, full)


def report(
    args: argparse.Namespace,
    meta: Meta,
    sizes: list[TableBytes],
    timed: list[Timed],
    dropped: Dropped,
    before: VacuumState,
    after: VacuumState,
    steady: SteadyReport,
    empty: float,
    full: float,
) -> None:
    from .upkeep import DROP_TARGET_S, WRITER_TOLERANCE

    print(
        f"\nwriter during the measurement: {steady.get('rows', 0):,} rows submitted and"
        f" {steady.get('written', 0):,} written in {steady.get('seconds', 0):.0f} s ="
        f" {steady.get('rows_per_second', 0):,.0f} rows/s (asked {args.rate:,}); lag p95"
        f" {steady.get('lag_p95_seconds', 0):.2f} s, max {steady.get('lag_max_seconds', 0):.2f} s;"
        f" spooled {steady.get('spilled', 0):,}, {steady.get('behind_at_end', 0):,} behind at the"
        " end"
    )
    print(
        f"autovacuum: before {len(before.behind)} tables past their threshold, after"
        f" {len(after.behind)} {after.behind[:5]}; vacuums running {after.running};"
        f" tables autovacuumed so far {after.vacuumed} of {after.tables}"
    )
    print(f"\nload average at the end: {_load()}")
    print("\n| target | measured | limit | verdict |")
    print("| --- | ---: | ---: | --- |")
    for t in timed:
        verdict = "met" if t.met else "NOT met"
        print(f"| {t.label} p95 | {t.p95:.1f} ms | {t.target_ms:.0f} ms | {verdict} |")
    ratio = full / empty if empty else 0.0
    print(
        f"| writer rows/s, full store / empty store | {full:,.0f} / {empty:,.0f} = {ratio:.2f} |"
        f" ≥ {1 - WRITER_TOLERANCE:.2f} | {'met' if ratio >= 1 - WRITER_TOLERANCE else 'NOT met'} |"
    )
    kept_up = steady.get("rows_per_second", 0) >= 0.99 * args.rate and not steady.get("spilled")
    print(
        f"| writer at {args.rate:,} rows/s while measuring"
        f" | {steady.get('rows_per_second', 0):,.0f} rows/s |"
        f" {args.rate:,} | {'met' if kept_up else 'NOT met'} |"
    )
    print(
        f"| drop a day ({dropped.how}) | {dropped.seconds:.2f} s | {DROP_TARGET_S:.0f} s |"
        f" {'met' if dropped.seconds <= DROP_TARGET_S else 'NOT met'} |"
    )
    backlog = bool(after.behind) or not after.autovacuum_on
    print(
        f"| autovacuum backlog (tables past threshold) | {len(after.behind)} |"
        f" 0 | {'met' if not backlog else 'NOT met'} |"
    )
    print(
        f"\nfill: {json.dumps(meta.get('filled', {}))},"
        f" rollups {meta.get('rollup_seconds', 0):.0f} s"
    )


def _rates(rates: list[float]) -> str:
    return ", ".join(f"{r:,.0f}" for r in rates) + f" (median {statistics.median(rates):,.0f})"


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def _meta(conn: psycopg.Connection) -> Meta:
    row = conn.execute("SELECT meta FROM bench_scale_meta").fetchone()
    if row is None:
        raise SystemExit("--keep: the database was never filled")
    meta: Meta = row[0]
    return meta


def _save_meta(conn: psycopg.Connection, meta: Meta) -> None:
    from psycopg.types.json import Jsonb

    conn.execute("CREATE TABLE IF NOT EXISTS bench_scale_meta (meta jsonb)")
    conn.execute("DELETE FROM bench_scale_meta")
    conn.execute("INSERT INTO bench_scale_meta VALUES (%s)", [Jsonb(meta)])
