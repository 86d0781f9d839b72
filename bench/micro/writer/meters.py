"""What the writer benchmark reads: this process's memory, the CPU of the process, of the run
writer's thread and of a Postgres backend, and one phase's result."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import dj_database_url
import psycopg
from psycopg import sql

PAGE = os.sysconf("SC_PAGE_SIZE")


def ensure_database(url: str) -> None:
    """Create the bench database if it does not exist."""
    parsed = dj_database_url.parse(url)
    with psycopg.connect(
        host=parsed["HOST"],
        port=parsed["PORT"] or 5432,
        user=parsed["USER"],
        password=parsed["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [parsed["NAME"]]
        ).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(parsed["NAME"])))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1_048_576


@dataclass
class RssSampler:
    """Sample this process's RSS every second on a thread."""

    samples: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> RssSampler:
        self.samples.append(rss_mb())
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.samples.append(rss_mb())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(rss_mb())


def backend_cpu(pid: int) -> float:
    """CPU seconds used so far by the Postgres backend process `pid` (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def writer_thread_cpu() -> float:
    """CPU seconds used so far by the live run writer threads."""
    return sum(
        time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        for thread in threading.enumerate()
        if thread.name.startswith("run-writer") and thread.ident is not None
    )


@dataclass
class CpuMeter:
    """The CPU time of the process and of the writer's thread over a phase."""

    process: float = 0.0
    writer: float = 0.0

    def __enter__(self) -> CpuMeter:
        self._process, self._writer = time.process_time(), writer_thread_cpu()
        return self

    def stop(self) -> None:
        """Read the writer's thread before the writer closes (its thread ends with it)."""
        self.process = time.process_time() - self._process
        self.writer = writer_thread_cpu() - self._writer

    def __exit__(self, *exc: object) -> None:
        pass


@dataclass
class Result:
    phase: str
    rows: int
    seconds: float
    spooled: int
    rss: list[float]
    cpu: CpuMeter = field(default_factory=CpuMeter)

    @property
    def rate(self) -> float:
        return self.rows / self.seconds
