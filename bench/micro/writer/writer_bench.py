"""`python -m bench micro writer`: its flags, every phase asked for, the table, and a check that
no row was lost (the package's docstring says more)."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from bench.commands import program
from bench.harness.results import recorded

from . import __doc__ as package_doc
from .meters import Result, ensure_database

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/mortar_bench"
TARGET_ROWS_PER_SECOND = 50_000


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog=program(__name__), description=(package_doc or "").splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--flood", type=int, default=0, help="rows submitted with no pause")
    parser.add_argument("--soak", type=float, default=0, help="seconds of steady load (0: skip)")
    parser.add_argument("--rate", type=int, default=20_000, help="rows/s during the soak")
    parser.add_argument(
        "--gateway-runs", type=int, default=3600, help="runs per gateway-batch phase (0: skip)"
    )
    args = parser.parse_args(argv)

    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["DATABASE_URL"] = os.environ.get("MORTAR_BENCH_DATABASE_URL", DEFAULT_URL)
    if "MORTAR_VAR_DIR" not in os.environ:  # a var/ (spool) of its own, removed at exit
        os.environ["MORTAR_VAR_DIR"] = tempfile.mkdtemp(prefix="mortar-writer-bench-")
        atexit.register(shutil.rmtree, os.environ["MORTAR_VAR_DIR"], ignore_errors=True)
    os.environ.setdefault("SECRET_KEY", "writer-bench-only")
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    with recorded("writer", "The run writer: rows/s, CPU per row, memory"):
        measure_all(args)


def measure_all(args: argparse.Namespace) -> None:
    """Every phase asked for, then the table, and a check that no row was lost."""
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from accounts.models import ApiKey, Organization
    from telemetry.models import Run, RunChunk

    from .batches import gateway_batches, slow_streams
    from .phases import CHUNK_BYTES, Owner, drain_spool, fill_spool, flood, soak, throughput

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(
            f"TRUNCATE {RunChunk._meta.db_table}, {Run._meta.db_table} RESTART IDENTITY CASCADE"
        )
    organization = Organization.objects.get_or_create(name="writer-bench")[0]
    key = ApiKey.objects.filter(organization=organization).first() or ApiKey.objects.create(
        organization=organization, prefix="mk-bench", digest=secrets.token_hex(32)
    )
    connection.close()
    owner = Owner(organization.id, key.id, Path(settings.VAR_DIR) / "spool")

    backlog_runs = args.backlog // args.chunks
    results: list[Result] = [asyncio.run(throughput(owner, args.runs, args.chunks))]
    if backlog_runs:
        results.append(fill_spool(owner, backlog_runs, args.chunks))
        results.append(asyncio.run(drain_spool(owner, backlog_runs * args.chunks)))
    expected = (args.runs + backlog_runs) * args.chunks
    if args.flood:
        results.append(asyncio.run(flood(owner, args.flood // args.chunks, args.chunks)))
        expected += args.flood // args.chunks * args.chunks
    if args.soak:
        results.append(asyncio.run(soak(owner, args.soak, args.rate, args.chunks)))
    if args.gateway_runs:
        for per_batch in (12, 80):
            results.append(gateway_batches(owner, args.gateway_runs, per_batch))
            expected += args.gateway_runs // per_batch * per_batch * 20
        results.append(gateway_batches(owner, args.gateway_runs, 30, streams=False))
        results.append(slow_streams(owner, 1000, 20, rounds=3))
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
