"""`write_batch` alone on batches shaped as the gateway fills them: streams and non-streaming
runs with every field the gateway records, and the slow streams' batches of one chunk each.
Import after `django.setup()`."""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import connection

from telemetry.models import Run
from telemetry.store.batches import write_batch
from telemetry.store.items import ChunkSent, RunClosed, RunOpened, WriterItem

from .meters import CpuMeter, Result, RssSampler, backend_cpu
from .phases import Owner

REQUEST_BODY = (
    b'{"model":"scripted-small","stream":true,"messages":[{"role":"system","content":'
    b'"You are a helpful assistant."},{"role":"user","content":"Tell me a short story '
    b'about a lighthouse keeper and a cat, in twenty words."}]}'
)
OPTIMIZER_REPORT = {
    "mode": "shadow",
    "applied": False,
    "tokens_before": 52,
    "tokens_after": 48,
    "saved_tokens": 4,
    "rules": ["trim_whitespace", "dedupe_system"],
    "elapsed_ms": 0.08,
}


def gateway_run(
    owner: Owner, now: datetime, *, chunk_count: int = 20
) -> tuple[RunOpened, list[ChunkSent], RunClosed]:
    """One stream's rows (a non-streaming run's with no chunk), with the fields the
    gateway records."""
    run_id = f"chatcmpl-{secrets.token_hex(12)}"
    opened = RunOpened(
        {
            "id": run_id,
            "accepted_at": now,
            "organization_id": owner.organization_id,
            "request_body": REQUEST_BODY,
            "request_bytes": len(REQUEST_BODY),
            "api_key_id": owner.key_id,
            "request_id": secrets.token_hex(16),
            "model": "scripted-small",
            "deployment": "scripted",
            "session": f"sess-{secrets.token_hex(8)}",
            "end_user": "user-42",
            "optimizer_report": OPTIMIZER_REPORT,
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
    return int(pid)


def gateway_batches(owner: Owner, runs: int, per_batch: int, *, streams: bool = True) -> Result:
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
                owner, datetime.now(UTC), chunk_count=20 if streams else 0
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
    result = Result(f"gateway {shape}, {per_batch}/batch", rows, seconds, 0, sampler.samples, cpu)
    print(
        f"{result.phase}: {cpu.writer * 1e6 / written:.0f} µs CPU per run in the writer,"
        f" {postgres * 1e6 / written:.0f} µs in Postgres ({written:,} runs)"
    )
    return result


def slow_streams(owner: Owner, streams: int, chunks: int, rounds: int) -> Result:
    """`write_batch` as 1,000 slow streams fill it: every batch a chunk of each stream
    (opened in an earlier batch), as a token every 50 ms meets the writer's 50 ms cycle."""
    batches: list[list[WriterItem]] = []
    for _ in range(rounds):
        runs = [gateway_run(owner, datetime.now(UTC), chunk_count=chunks) for _ in range(streams)]
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
