"""What keeping the store costs at scale: dropping a day, autovacuum keeping up, the bytes a run
and a chunk take, and the run writer's rows/s (on an empty store, then on the full one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import psycopg

from bench.harness.constants import ROOT

from . import database
from .writer_load import SteadyReport

DROP_TARGET_S = 1.0
WRITER_TOLERANCE = 0.10  # the full store's writer within 10% of the empty store's


def writer_burst(streams: int, rounds: int) -> list[float]:
    """The writer's rows/s on `streams` streams, `rounds` times, each in a process of its own."""
    rates = []
    for _ in range(rounds):
        with tempfile.NamedTemporaryFile(suffix=".json") as report:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench",
                    "scale-writer",
                    "--burst",
                    str(streams),
                    "--report",
                    report.name,
                ],
                cwd=ROOT,
                check=True,
            )
            rates.append(json.loads(Path(report.name).read_text())["rows_per_second"])
    return rates


class SteadyWriter:
    """The writer at a steady rate in its own process, while something else is measured."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        handle, name = tempfile.mkstemp(suffix=".json")
        os.close(handle)
        self._report = Path(name)
        self.result: SteadyReport = {}

    def __enter__(self) -> SteadyWriter:
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench",
                "scale-writer",
                "--rate",
                str(self.rate),
                "--report",
                str(self._report),
            ],
            cwd=ROOT,
        )
        time.sleep(5)  # Django set up, the writer's first batches in
        return self

    def __exit__(self, *exc: object) -> None:
        self._process.terminate()
        self._process.wait(120)
        text = self._report.read_text()
        if text:
            self.result = json.loads(text)
        self._report.unlink(missing_ok=True)


@dataclass(frozen=True)
class Dropped:
    how: str
    seconds: float
    what: str


def drop_oldest_day(conn: psycopg.Connection, oldest: date) -> Dropped:
    """Drop the oldest day as retention would: its partitions (detach and drop), or on an
    unpartitioned store, its runs and chunks deleted in one transaction."""
    if database.layout(conn).partitioned:
        from datetime import timedelta

        from telemetry.store.partitions import drop_partitions_before, partition_days

        # The oldest day there is (an earlier run with --keep may have dropped the plan's).
        oldest = min(partition_days())
        began = time.perf_counter()
        names = drop_partitions_before(oldest + timedelta(days=1))
        seconds = time.perf_counter() - began
        return Dropped("drop_partitions_before", seconds, ", ".join(names) or "nothing")
    began = time.perf_counter()
    with conn.transaction():
        chunks = conn.execute(
            "DELETE FROM telemetry_runchunk WHERE run_id IN (SELECT id FROM telemetry_run"
            " WHERE accepted_at < %s::date + 1)",
            [oldest],
        ).rowcount
        runs = conn.execute(
            "DELETE FROM telemetry_run WHERE accepted_at < %s::date + 1", [oldest]
        ).rowcount
    seconds = time.perf_counter() - began
    return Dropped("DELETE (no partitions)", seconds, f"{runs:,} runs, {chunks:,} chunks")


@dataclass(frozen=True)
class VacuumState:
    tables: int  # run and chunk tables (partitions) looked at
    behind: list[tuple[str, int, int]]  # (table, dead rows, autovacuum's threshold) past it
    running: int  # vacuums in progress
    vacuumed: int  # tables autovacuum vacuumed during the measurement
    autovacuum_on: bool


def vacuum_state(conn: psycopg.Connection) -> VacuumState:
    """Dead rows against autovacuum's own threshold (50 + 20% of the live rows, the defaults),
    for the run and chunk tables and their partitions."""
    rows = conn.execute(
        """
        SELECT relname, n_dead_tup, n_live_tup, last_autovacuum
        FROM pg_stat_user_tables
        WHERE relname LIKE 'telemetry\\_run%%' OR relname LIKE 'telemetry\\_usage%%'
        """
    ).fetchall()
    threshold = conn.execute(
        "SELECT current_setting('autovacuum_vacuum_threshold')::int,"
        " current_setting('autovacuum_vacuum_scale_factor')::float,"
        " current_setting('autovacuum')::bool"
    ).fetchone()
    assert threshold is not None
    base, scale, on = threshold
    behind = [
        (name, dead, int(base + scale * live))
        for name, dead, live, _ in rows
        if dead > base + scale * live
    ]
    running = conn.execute("SELECT count(*) FROM pg_stat_progress_vacuum").fetchone()
    vacuumed = sum(1 for *_, last in rows if last is not None)
    return VacuumState(len(rows), behind, running[0] if running else 0, vacuumed, bool(on))


def set_autovacuum(conn: psycopg.Connection, on: bool | None) -> None:
    """Turn autovacuum on for the server (a reload), or back to its configuration (None)."""
    if on is None:
        conn.execute("ALTER SYSTEM RESET autovacuum")
    else:
        conn.execute(f"ALTER SYSTEM SET autovacuum = {'on' if on else 'off'}")
    conn.execute("SELECT pg_reload_conf()")
    time.sleep(1)
