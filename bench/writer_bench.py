"""Measure the run writer: chunk rows per second into Postgres, CPU per row, memory (RSS).

Runs against its own database (MORTAR_BENCH_DATABASE_URL, default mortar_bench on the local
Postgres; created and migrated if missing, its run tables emptied first) and its own var/
directory for the spool. The targets (issue 8): ≥ 50,000 chunk rows/s, RSS flat.

    .venv/bin/python bench/writer_bench.py [--runs 2000] [--chunks 50] [--backlog 1000000]
                                           [--flood ROWS] [--soak SECONDS --rate ROWS_PER_S]
                                           [--gateway-runs 3600]

Phases (each run opens, CHUNKS chunks of 300 bytes, closes; 200 streams interleaved):
- throughput: RUNS runs through a RunWriter kept busy (the producer pauses while more than
  20,000 rows wait, so the writer never needs its spool); rows/s until all are written.
- spool a backlog / drain it: BACKLOG rows left in a spool file, as by a process that died
  during an outage; a new writer claims and drains it (the replay path), RSS sampled each second.
- flood (optional): ROWS submitted with no pause at all; the writer falls behind and spools.
- soak (optional): a steady RATE rows/s for SECONDS, RSS sampled each second.
- gateway batches: `write_batch` alone on batches shaped like the gateway's (each run opens
  with ~17 fields, sends 20 chunks of ~150 bytes and closes with ~15 fields, usage and reply
  text included, in the next batch), 12 and 80 runs a batch; and non-streaming runs (opened and
  closed in the same batch, so stored by one insert), 30 a batch, as one connection's requests
  fill the writer's 50 ms cycle; and 1,000 slow streams, each batch a chunk of every stream.
  For each: the CPU of the calling thread per run (per chunk, for slow streams), and the CPU
  Postgres's backend spends (read from /proc: Postgres must run on this machine).

"writer CPU µs/row" is the CPU time of the writer's thread per chunk row (the share of the
gateway's core that the writer takes); "process CPU" adds the producer's.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/mortar_bench"
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
os.environ["DATABASE_URL"] = os.environ.get("MORTAR_BENCH_DATABASE_URL", DEFAULT_URL)
if "MORTAR_VAR_DIR" not in os.environ:  # a var/ (spool) of its own, removed at exit
    os.environ["MORTAR_VAR_DIR"] = tempfile.mkdtemp(prefix="mortar-writer-bench-")
    atexit.register(shutil.rmtree, os.environ["MORTAR_VAR_DIR"], ignore_errors=True)
os.environ.setdefault("SECRET_KEY", "writer-bench-only")
os.environ.setdefault("LOG_LEVEL", "ERROR")

import dj_database_url  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

TARGET_ROWS_PER_SECOND = 50_000
CHUNK_BYTES = 300
CONCURRENT_STREAMS = 200
QUEUE_CAP = 20_000  # the throughput producer pauses above this many queued rows
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--flood", type=int, default=0, help="rows submitted with no pause")
    parser.add_argument("--soak", type=float, default=0, help="seconds of steady load (0: skip)")
    parser.add_argument("--rate", type=int, default=20_000, help="rows/s during the soak")
    parser.add_argument(
        "--gateway-runs", type=int, default=3600, help="runs per gateway-batch phase (0: skip)"
    )
    args = parser.parse_args()

    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from accounts.models import ApiKey, Organization
    from telemetry.models import Run, RunChunk
    from telemetry.store.batches import write_batch
    from telemetry.store.items import ChunkSent, RunClosed, RunOpened, WriterItem, encode_row
    from telemetry.store.spool import Spool
    from telemetry.store.writer import RunWriter

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            f"TRUNCATE {RunChunk._meta.db_table}, {Run._meta.db_table} RESTART IDENTITY CASCADE"
        )
    organization = Organization.objects.get_or_create(name="writer-bench")[0]
    organization_id = organization.id
    key_id = (
        ApiKey.objects.filter(organization=organization).first()
        or ApiKey.objects.create(
            organization=organization, prefix="mk-bench", digest=secrets.token_hex(32)
        )
    ).id
    connection.close()
    spool_dir = Path(settings.VAR_DIR) / "spool"

    def streams(runs: int, chunks: int) -> Iterator[object]:
        """The rows of `runs` runs, as CONCURRENT_STREAMS streams at a time would submit them."""
        for first in range(0, runs, CONCURRENT_STREAMS):
            ids = [
                f"chatcmpl-{secrets.token_hex(12)}"
                for _ in range(min(CONCURRENT_STREAMS, runs - first))
            ]
            for run_id in ids:
                yield RunOpened(
                    {
                        "id": run_id,
                        "organization_id": organization_id,
                        "accepted_at": datetime.now(UTC),
                        "status": Run.Status.IN_PROGRESS,
                    }
                )
            for seq in range(chunks):
                for run_id in ids:
                    # A fresh bytes object per chunk, as a real stream makes.
                    data = b"data: %s %05d " % (run_id.encode(), seq)
                    data += b"x" * (CHUNK_BYTES - len(data) - 2) + b"\n\n"
                    yield ChunkSent(run_id, seq, seq * 1000, data)
            for run_id in ids:
                yield RunClosed(
                    run_id,
                    {
                        "status": Run.Status.COMPLETED,
                        "finished_at": datetime.now(UTC),
                        "chunk_count": chunks,
                    },
                )

    def new_writer() -> RunWriter:
        return RunWriter(
            batch_size=settings.MORTAR_WRITER_BATCH_SIZE,
            interval=settings.MORTAR_WRITER_INTERVAL_MS / 1000,
        )

    async def throughput(runs: int, chunks: int) -> Result:
        """Keep the writer busy (at most QUEUE_CAP rows waiting); time until all is written."""
        writer = new_writer()
        with RssSampler() as sampler, CpuMeter() as cpu:
            started = time.perf_counter()
            for n, item in enumerate(streams(runs, chunks)):
                writer.submit(item)  # type: ignore[arg-type]
                if n % 1000 == 999:
                    await asyncio.sleep(0)  # the event loop of a busy worker
                    while writer.depth > QUEUE_CAP:  # noqa: ASYNC110 (polling is the point)
                        await asyncio.sleep(0.001)
            await writer.flush()
            seconds = time.perf_counter() - started
            cpu.stop()
        await writer.close()
        return Result(
            f"throughput {runs:,} x {chunks}",
            runs * chunks,
            seconds,
            writer.spilled_total,
            sampler.samples,
            cpu,
        )

    def fill_spool(runs: int, chunks: int) -> Result:
        """Leave a backlog in a spool file, as a process that died in an outage would."""
        spool = Spool(spool_dir)
        batch: list[tuple[object, ...]] = []
        records: list[list[tuple[object, ...]]] = []
        with RssSampler() as sampler:
            started = time.perf_counter()
            for item in streams(runs, chunks):
                batch.append(encode_row(item))  # type: ignore[arg-type]
                if len(batch) == settings.MORTAR_WRITER_BATCH_SIZE:
                    records.append(batch)
                    batch = []
                    if len(records) == 25:
                        spool.append(records, time.time())
                        records = []
            spool.append([*records, batch] if batch else records, time.time())
            spooled = spool.pending
            spool.close()
            seconds = time.perf_counter() - started
        return Result("spool a backlog", runs * chunks, seconds, spooled, sampler.samples)

    async def drain_spool(rows: int) -> Result:
        """Start a writer on the leftover spool; time until it is drained."""
        writer = new_writer()
        with RssSampler() as sampler, CpuMeter() as cpu:
            started = time.perf_counter()
            writer.start()
            # The writer deletes each spool file once it is drained.
            while list(spool_dir.glob("*.bin")):  # noqa: ASYNC110 (no event to wait on)
                await asyncio.sleep(0.01)
            seconds = time.perf_counter() - started
            cpu.stop()
        await writer.close()
        return Result(f"drain a {rows:,}-row backlog", rows, seconds, 0, sampler.samples, cpu)

    async def flood(runs: int, chunks: int) -> Result:
        """Submit as fast as possible, no pause: the writer falls behind and spools."""
        writer = new_writer()
        with RssSampler() as sampler, CpuMeter() as cpu:
            started = time.perf_counter()
            for n, item in enumerate(streams(runs, chunks)):
                writer.submit(item)  # type: ignore[arg-type]
                if n % 1000 == 999:
                    await asyncio.sleep(0)
            await writer.flush()
            seconds = time.perf_counter() - started
            cpu.stop()
        await writer.close()
        return Result(
            f"flood {runs * chunks:,} rows",
            runs * chunks,
            seconds,
            writer.spilled_total,
            sampler.samples,
            cpu,
        )

    async def soak(seconds: float, rate: int, chunks: int) -> Result:
        """A steady `rate` rows/s for `seconds`."""
        writer = new_writer()
        items = streams(10**9, chunks)
        submitted = chunk_rows = 0
        with RssSampler() as sampler, CpuMeter() as cpu:
            started = time.perf_counter()
            while (now := time.perf_counter() - started) < seconds:
                for _ in range(int(now * rate) - submitted):
                    item = next(items)
                    writer.submit(item)  # type: ignore[arg-type]
                    submitted += 1
                    chunk_rows += isinstance(item, ChunkSent)
                await asyncio.sleep(0.01)
            await writer.flush()
            elapsed = time.perf_counter() - started
            cpu.stop()
        await writer.close()
        return Result(
            f"soak {rate:,} rows/s",
            chunk_rows,
            elapsed,
            writer.spilled_total,
            sampler.samples,
            cpu,
        )

    request_body = (
        b'{"model":"scripted-small","stream":true,"messages":[{"role":"system","content":'
        b'"You are a helpful assistant."},{"role":"user","content":"Tell me a short story '
        b'about a lighthouse keeper and a cat, in twenty words."}]}'
    )
    optimizer_report = {
        "mode": "shadow",
        "applied": False,
        "tokens_before": 52,
        "tokens_after": 48,
        "saved_tokens": 4,
        "rules": ["trim_whitespace", "dedupe_system"],
        "elapsed_ms": 0.08,
    }

    def gateway_run(
        now: datetime, *, chunk_count: int = 20
    ) -> tuple[RunOpened, list[ChunkSent], RunClosed]:
        """One stream's rows (a non-streaming run's with no chunk), with the fields the
        gateway records."""
        run_id = f"chatcmpl-{secrets.token_hex(12)}"
        opened = RunOpened(
            {
                "id": run_id,
                "accepted_at": now,
                "organization_id": organization_id,
                "request_body": request_body,
                "request_bytes": len(request_body),
                "api_key_id": key_id,
                "request_id": secrets.token_hex(16),
                "model": "scripted-small",
                "deployment": "scripted",
                "session": f"sess-{secrets.token_hex(8)}",
                "end_user": "user-42",
                "optimizer_report": optimizer_report,
                "prompt_tokens": 52,
                "stream": True,
                "max_tokens": 256,
                "upstream_request": None,
                "status": Run.Status.IN_PROGRESS,
            }
        )
        chunks = [
            ChunkSent(
                run_id,
                seq,
                1500 + seq * 900,
                b'data: {"id":"%s","object":"chat.completion.chunk","choices":[{"index":0,'
                b'"delta":{"content":"word%02d "}}]}\n\n' % (run_id.encode(), seq),
            )
            for seq in range(chunk_count)
        ]
        closed = RunClosed(
            run_id,
            {
                "replica": "",
                "session_kept": None,
                "status": Run.Status.COMPLETED,
                "finished_at": now + timedelta(milliseconds=20),
                "first_token_at": now + timedelta(milliseconds=2),
                "chunk_count": chunk_count,
                "finish_reason": "stop",
                "reply_text": " ".join(f"word{seq:02d}" for seq in range(20)),
                "prompt_tokens": 52,
                "completion_tokens": 20,
                "total_tokens": 72,
                "cached_tokens": None,
                "cost": Decimal("0.000123400"),
                "usage": {"prompt_tokens": 52, "completion_tokens": 20, "total_tokens": 72},
                "usage_source": Run.UsageSource.ESTIMATE,
            },
        )
        return opened, chunks, closed

    def backend_pid() -> int:
        """The process id of the Postgres backend behind this thread's connection."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        return pid

    def gateway_batches(runs: int, per_batch: int, *, streams: bool = True) -> Result:
        """`write_batch` on gateway-shaped batches: each holds the opens and chunks of
        `per_batch` streams and the closes of the batch before (a stream spans two batches),
        or the whole of `per_batch` non-streaming runs (each stored by one insert)."""
        batches: list[list[WriterItem]] = []
        closes: list[WriterItem] = []
        for _ in range(runs // per_batch + 1):
            batch: list[WriterItem] = []
            later: list[WriterItem] = []
            for _ in range(per_batch):
                opened, chunks, closed = gateway_run(
                    datetime.now(UTC), chunk_count=20 if streams else 0
                )
                batch += [opened, *chunks]
                (later if streams else batch).append(closed)
            batches.append(batch + closes)
            closes = later
        write_batch(batches[0])  # connects, and warms up
        backend = backend_pid()
        with RssSampler() as sampler:
            started, cpu_started = time.perf_counter(), time.thread_time()
            backend_started = backend_cpu(backend)
            for batch in batches[1:]:
                write_batch(batch)
            seconds = time.perf_counter() - started
            cpu = CpuMeter(writer=time.thread_time() - cpu_started)  # this thread writes
            postgres = backend_cpu(backend) - backend_started
        connection.close()
        shape = "stream" if streams else "non-streaming"
        written = (len(batches) - 1) * per_batch
        rows = sum(isinstance(item, ChunkSent) for batch in batches[1:] for item in batch)
        result = Result(
            f"gateway {shape}, {per_batch}/batch", rows, seconds, 0, sampler.samples, cpu
        )
        print(
            f"{result.phase}: {cpu.writer * 1e6 / written:.0f} µs CPU per run in the writer,"
            f" {postgres * 1e6 / written:.0f} µs in Postgres ({written:,} runs)"
        )
        return result

    def slow_streams(streams: int, chunks: int, rounds: int) -> Result:
        """`write_batch` as 1,000 slow streams fill it: every batch a chunk of each stream
        (opened in an earlier batch), as a token every 50 ms meets the writer's 50 ms cycle."""
        batches: list[list[WriterItem]] = []
        for _ in range(rounds):
            runs = [gateway_run(datetime.now(UTC), chunk_count=chunks) for _ in range(streams)]
            batches.append([opened for opened, _, _ in runs])
            batches += [[sent[seq] for _, sent, _ in runs] for seq in range(chunks)]
            batches.append([closed for _, _, closed in runs])
        write_batch(batches[0])  # connects
        backend = backend_pid()
        chunk_batches = [batch for batch in batches[1:] if isinstance(batch[0], ChunkSent)]
        with RssSampler() as sampler:
            started, cpu_started = time.perf_counter(), time.thread_time()
            backend_started, in_chunks, in_chunks_postgres = backend_cpu(backend), 0.0, 0.0
            for batch in batches[1:]:
                chunk_started, chunk_backend = time.thread_time(), backend_cpu(backend)
                write_batch(batch)
                if isinstance(batch[0], ChunkSent):
                    in_chunks += time.thread_time() - chunk_started
                    in_chunks_postgres += backend_cpu(backend) - chunk_backend
            seconds = time.perf_counter() - started
            cpu = CpuMeter(writer=time.thread_time() - cpu_started)
            postgres = backend_cpu(backend) - backend_started
        connection.close()
        rows = sum(len(batch) for batch in chunk_batches)
        result = Result(f"slow streams, {streams:,} open", rows, seconds, 0, sampler.samples, cpu)
        print(
            f"{result.phase}: a lone chunk's batch row {in_chunks * 1e6 / rows:.1f} µs CPU in the"
            f" writer, {in_chunks_postgres * 1e6 / rows:.1f} µs in Postgres; a whole run"
            f" {cpu.writer * 1e6 / streams / rounds:.0f} µs and"
            f" {postgres * 1e6 / streams / rounds:.0f} µs ({rows:,} chunks)"
        )
        return result

    backlog_runs = args.backlog // args.chunks
    results = [asyncio.run(throughput(args.runs, args.chunks))]
    if backlog_runs:
        results.append(fill_spool(backlog_runs, args.chunks))
        results.append(asyncio.run(drain_spool(backlog_runs * args.chunks)))
    expected = (args.runs + backlog_runs) * args.chunks
    if args.flood:
        results.append(asyncio.run(flood(args.flood // args.chunks, args.chunks)))
        expected += args.flood // args.chunks * args.chunks
    if args.soak:
        results.append(asyncio.run(soak(args.soak, args.rate, args.chunks)))
    if args.gateway_runs:
        for per_batch in (12, 80):
            results.append(gateway_batches(args.gateway_runs, per_batch))
            expected += args.gateway_runs // per_batch * per_batch * 20
        results.append(gateway_batches(args.gateway_runs, 30, streams=False))
        results.append(slow_streams(1000, 20, rounds=3))
        expected += 3 * 1000 * 20

    stored = RunChunk.objects.count()
    database = settings.DATABASES["default"]["NAME"]
    batch = settings.MORTAR_WRITER_BATCH_SIZE
    print(f"database {database}, batch {batch}, chunk {CHUNK_BYTES} B, {os.cpu_count()} CPUs")
    header = f"{'phase':<34}{'chunk rows':>12}{'seconds':>9}{'rows/s':>10}{'via spool':>11}"
    header += f"{'RSS min MB':>12}{'RSS max MB':>12}"
    header += f"{'writer CPU µs/row':>19}{'process CPU µs/row':>20}"
    print(header)
    print("-" * len(header))
    for r in results:
        writer_cpu = f"{r.cpu.writer * 1e6 / r.rows:.1f}" if r.cpu.writer and r.rows else "-"
        process_cpu = f"{r.cpu.process * 1e6 / r.rows:.1f}" if r.cpu.process and r.rows else "-"
        print(
            f"{r.phase:<34}{r.rows:>12,}{r.seconds:>9.2f}{r.rate:>10,.0f}{r.spooled:>11,}"
            f"{min(r.rss):>12.0f}{max(r.rss):>12.0f}{writer_cpu:>19}{process_cpu:>20}"
        )
    verdict = "met" if results[0].rate >= TARGET_ROWS_PER_SECOND else "NOT met"
    print(f"target ≥ {TARGET_ROWS_PER_SECOND:,} chunk rows/s: {verdict}")
    print(f"chunk rows stored: {stored:,} (expected at least {expected:,})")
    if stored < expected:
        raise SystemExit("rows are missing")


if __name__ == "__main__":
    main()
