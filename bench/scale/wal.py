"""What storing a request costs Postgres: WAL bytes, CPU and disk a request, for non-streaming
requests (a run and its JSON body, one chunk) and 20-chunk streams, measured on a Postgres
cluster of its own so that nothing else writes WAL or spends CPU in it.

    .venv/bin/python -m bench wal [--requests 6000]

The cluster: Debian's Postgres 15 binaries (`/usr/lib/postgresql/15/bin`), `initdb` into a
temporary directory as the `postgres` user, its defaults but `fsync=off` (the disk's speed is not
what is measured; WAL is written all the same), `shared_buffers=256MB` and autovacuum off (its
ANALYZE of a table growing from nothing would be counted many times over; the run table is
VACUUMed after each measure instead, and that is counted), on a free port;
stopped and removed after. Mortar's migrations are applied to a database in it. The rows are
the gateway's (`bench.scale.writer_load.RunMaker`), written with the run writer's own
`write_batch` in the gateway's batch shapes: 80 streams a batch (their opens and chunks, and the
closes of the batch before), 30 non-streaming requests a batch (opened, answered and closed in
it, so stored by one insert each). A warm-up of a fifth as many requests first, then the timed
requests: WAL from `pg_current_wal_lsn()`, CPU from /proc for every process of the cluster
(backends, WAL writer, checkpointer, background writer), bytes from the tables' sizes.
Prints a table; the capacity planning page (docs/operating/capacity.md) reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from bench.commands import program
from bench.harness.results import recorded

if TYPE_CHECKING:
    from telemetry.store.items import WriterItem

    from .writer_load import RunMaker

PG_BIN = Path("/usr/lib/postgresql/15/bin")
STREAMS_PER_BATCH = 80
JSON_PER_BATCH = 30


def _as_postgres(command: list[str], cwd: Path) -> None:
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, *command], cwd=cwd, check=True, capture_output=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_cluster() -> Iterator[tuple[int, Path]]:
    """A fresh Postgres cluster, started; yields its port and data directory."""
    base = Path(tempfile.mkdtemp(prefix="mortar-wal-"))
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    data = base / "data"
    port = _free_port()
    try:
        _as_postgres(
            [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
             "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
            base,
        )  # fmt: skip
        options = (
            f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={base}"
            " -c fsync=off -c shared_buffers=256MB -c autovacuum=off"
        )
        _as_postgres(
            [str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-o", options,
             "-w", "-t", "60", "start"],
            base,
        )  # fmt: skip
        yield port, data
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            _as_postgres(
                [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], base
            )
        shutil.rmtree(base, ignore_errors=True)


def cluster_cpu(data: Path) -> float:
    """CPU seconds used so far by every process of the cluster (the postmaster's children)."""
    postmaster = int((data / "postmaster.pid").read_text().split()[0])
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            if pid == postmaster or int(fields[1]) == postmaster:
                total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def store_bytes(conn: psycopg.Connection) -> int:
    got = conn.execute(
        "SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('telemetry_run')"
        " UNION ALL"
        " SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('telemetry_runchunk')"
    ).fetchall()
    return sum(int(row[0] or 0) for row in got)


def wal_lsn(conn: psycopg.Connection) -> int:
    got = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(got[0]) if got else 0


def batches(maker: RunMaker, requests: int, *, stream: bool) -> list[list[WriterItem]]:
    """The writer's batches for `requests` requests, as the gateway fills them."""
    from telemetry.store.items import ChunkSent

    made: list[list[WriterItem]] = []
    if stream:
        closes: list[WriterItem] = []
        for _ in range(0, requests, STREAMS_PER_BATCH):
            batch: list[WriterItem] = []
            later: list[WriterItem] = []
            for _ in range(STREAMS_PER_BATCH):
                opened, chunks, closed = maker.run(datetime.now(UTC))
                batch += [opened, *chunks]
                later.append(closed)
            made.append(batch + closes)
            closes = later
        made.append(closes)
        return made
    for _ in range(0, requests, JSON_PER_BATCH):
        batch = []
        for _ in range(JSON_PER_BATCH):
            opened, (first, *_), closed = maker.run(datetime.now(UTC))
            body = (
                b'{"id":"%s","object":"chat.completion","created":1733000000,"model":"%s",'
                b'"choices":[{"index":0,"message":{"role":"assistant","content":"%s"},'
                b'"finish_reason":"stop"}],"usage":{"prompt_tokens":52,"completion_tokens":40,'
                b'"total_tokens":92}}'
                % (
                    first.run_id.encode(),
                    opened.fields["model"].encode(),
                    closed.fields["reply_text"].encode(),
                )
            )
            opened.fields["stream"] = False
            closed.fields["chunk_count"] = 1
            batch += [opened, ChunkSent(first.run_id, 0, 900, body), closed]
        made.append(batch)
    return made


def measure(port: int, data: Path, requests: int) -> list[tuple[str, float, float, float]]:
    """(kind, WAL bytes, Postgres CPU ms, stored bytes) a request, for JSON and streams."""
    from django.db import connection

    from accounts.models import ApiKey, Organization
    from bench.micro.writer.phases import Owner
    from telemetry.store.batches import write_batch

    from .writer_load import RunMaker

    organization = Organization.objects.create(name="scale-org-00")
    key = ApiKey.objects.create(organization=organization, prefix="mk-scale000", digest="0" * 64)
    maker = RunMaker([Owner(organization.pk, key.pk, data)])
    results = []
    with psycopg.connect(f"postgres://postgres@127.0.0.1:{port}/mortar", autocommit=True) as conn:
        for kind, stream in (("non-streaming", False), ("20-chunk stream", True)):
            for batch in batches(maker, requests // 5, stream=stream):  # warm-up
                write_batch(batch)
            timed = batches(maker, requests, stream=stream)
            wal, cpu, size = wal_lsn(conn), cluster_cpu(data), store_bytes(conn)
            began = time.perf_counter()
            for batch in timed:
                write_batch(batch)
            seconds = time.perf_counter() - began
            time.sleep(0.5)  # the WAL writer's last flush
            # The closes' dead rows, removed as autovacuum would (counted: a stream's close is an
            # UPDATE); not its ANALYZE, whose cost on a table this small is no steady state's.
            conn.execute("VACUUM telemetry_run")
            wal = wal_lsn(conn) - wal
            cpu = cluster_cpu(data) - cpu
            size = store_bytes(conn) - size
            results.append((kind, wal / requests, cpu * 1000 / requests, size / requests))
            print(
                f"  {kind}: {requests:,} requests in {seconds:.1f} s; a request: WAL"
                f" {wal / requests:,.0f} B, Postgres CPU {cpu * 1000 / requests:.3f} ms,"
                f" stored {size / requests:,.0f} B",
                flush=True,
            )
    connection.close()
    return results


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog=program(__name__), description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--requests", type=int, default=6000)
    args = parser.parse_args(argv)
    with (
        recorded("wal", "WAL, Postgres CPU and bytes a stored request") as _,
        private_cluster() as (port, data),
    ):
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c",
             "CREATE DATABASE mortar"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:{port}/mortar"
        os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
        os.environ.setdefault("SECRET_KEY", "wal-bench-only")
        os.environ.setdefault("LOG_LEVEL", "ERROR")
        os.environ.pop("REDIS_URL", None)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print(f"a Postgres 15 cluster of its own (port {port}), {os.cpu_count()} CPUs:")
        results = measure(port, data, args.requests)
        print("\n| request | WAL | Postgres CPU | stored (heap, indexes, TOAST) |")
        print("| --- | ---: | ---: | ---: |")
        for kind, wal, cpu, size in results:
            print(f"| {kind} | {wal:,.0f} B | {cpu:.3f} ms | {size:,.0f} B |")
