"""The run writer under load: kept busy (rows/s), a backlog spooled and drained, a flood with
no pause, a steady soak. Import after `django.setup()`."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings

from telemetry.models import Run
from telemetry.store.items import ChunkSent, RunClosed, RunOpened, WriterItem, encode_row
from telemetry.store.spool import Spool
from telemetry.store.writer import RunWriter

from .meters import CpuMeter, Result, RssSampler

CHUNK_BYTES = 300
CONCURRENT_STREAMS = 200
QUEUE_CAP = 20_000  # the throughput producer pauses above this many queued rows


@dataclass(frozen=True)
class Owner:
    """Whose runs the benchmark writes, and where the writer spools."""

    organization_id: int
    key_id: int
    spool_dir: Path


def streams(owner: Owner, runs: int, chunks: int) -> Iterator[WriterItem]:
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
                    "organization_id": owner.organization_id,
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


async def throughput(owner: Owner, runs: int, chunks: int) -> Result:
    """Keep the writer busy (at most QUEUE_CAP rows waiting); time until all is written."""
    writer = new_writer()
    with RssSampler() as sampler, CpuMeter() as cpu:
        started = time.perf_counter()
        for n, item in enumerate(streams(owner, runs, chunks)):
            writer.submit(item)
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


def fill_spool(owner: Owner, runs: int, chunks: int) -> Result:
    """Leave a backlog in a spool file, as a process that died in an outage would."""
    spool = Spool(owner.spool_dir)
    batch: list[tuple[object, ...]] = []
    records: list[list[tuple[object, ...]]] = []
    with RssSampler() as sampler:
        started = time.perf_counter()
        for item in streams(owner, runs, chunks):
            batch.append(encode_row(item))
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


async def drain_spool(owner: Owner, rows: int) -> Result:
    """Start a writer on the leftover spool; time until it is drained."""
    writer = new_writer()
    with RssSampler() as sampler, CpuMeter() as cpu:
        started = time.perf_counter()
        writer.start()
        # The writer deletes each spool file once it is drained.
        while list(owner.spool_dir.glob("*.bin")):  # noqa: ASYNC110 (no event to wait on)
            await asyncio.sleep(0.01)
        seconds = time.perf_counter() - started
        cpu.stop()
    await writer.close()
    return Result(f"drain a {rows:,}-row backlog", rows, seconds, 0, sampler.samples, cpu)


async def flood(owner: Owner, runs: int, chunks: int) -> Result:
    """Submit as fast as possible, no pause: the writer falls behind and spools."""
    writer = new_writer()
    with RssSampler() as sampler, CpuMeter() as cpu:
        started = time.perf_counter()
        for n, item in enumerate(streams(owner, runs, chunks)):
            writer.submit(item)
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


async def soak(owner: Owner, seconds: float, rate: int, chunks: int) -> Result:
    """A steady `rate` rows/s for `seconds`."""
    writer = new_writer()
    items = streams(owner, 10**9, chunks)
    submitted = chunk_rows = 0
    with RssSampler() as sampler, CpuMeter() as cpu:
        started = time.perf_counter()
        while (now := time.perf_counter() - started) < seconds:
            for _ in range(int(now * rate) - submitted):
                item = next(items)
                writer.submit(item)
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
