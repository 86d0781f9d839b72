"""The run writer in a process of its own, on the scale benchmark's database: a steady rate of
rows while the pages are timed, or a burst as fast as it takes them.

    python -m bench scale-writer --rate 20000 --report FILE   # until SIGTERM
    python -m bench scale-writer --burst 5000 --report FILE   # 5,000 streams, timed

The rows are the gateway's (`bench.micro.writer.batches.gateway_run`: a stream of 20 chunks
with every field the gateway records; its request and reply carry the fill's kind of text, so
each closed run is tokenized for search as the filled ones were); a rate counts every row
(opens, chunks and closes). It runs the real
`RunWriter` (its queue, batches, binary COPY, crash log) on this process's event loop, as a
gateway worker does, so its rows/s is what a worker's writer stores. The report is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from bench.commands import program

from . import database

if TYPE_CHECKING:
    from bench.micro.writer.phases import Owner
    from telemetry.store.items import ChunkSent, RunClosed, RunOpened, WriterItem
    from telemetry.store.writer import RunWriter

QUEUE_CAP = 20_000  # the burst's producer pauses above this many queued rows (a busy worker's)
SAMPLE_SECONDS = 0.5


class SteadyReport(TypedDict, total=False):
    """What a steady run reports (nothing, if it was stopped before it could)."""

    rate: int
    rows: int
    written: int
    behind_at_end: int
    seconds: float
    rows_per_second: float
    lag_p95_seconds: float
    lag_max_seconds: float
    depth_max: int
    spilled: int


class BurstReport(TypedDict):
    streams: int
    rows: int
    seconds: float
    rows_per_second: float
    spilled: int


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog=program(__name__), description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--database", default=database.NAME)
    parser.add_argument("--rate", type=int, default=0, help="rows/s until SIGTERM")
    parser.add_argument("--burst", type=int, default=0, help="streams written as fast as taken")
    parser.add_argument("--report", type=Path, required=True)
    args = parser.parse_args(argv)
    os.environ["DATABASE_URL"] = database.server_url(args.database)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("SECRET_KEY", "scale-bench-only")
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    os.environ.pop("REDIS_URL", None)
    with tempfile.TemporaryDirectory(prefix="mortar-scale-writer-") as var:
        os.environ["MORTAR_VAR_DIR"] = var  # its spool and crash log, removed after
        import django

        django.setup()
        report = asyncio.run(steady(args.rate) if args.rate else burst(args.burst))
    args.report.write_text(json.dumps(report))


def _owners() -> list[Owner]:
    """The scale organizations' keys, in the fill's order (organization, then key): the fill's
    key of organization o and draw k is the (5o + k)-th."""
    from django.conf import settings

    from accounts.models import ApiKey
    from bench.micro.writer.phases import Owner

    keys = ApiKey.objects.filter(prefix__startswith="mk-scale").exclude(name="scale-replay")
    owners = [
        Owner(key.organization_id, key.pk, Path(settings.VAR_DIR) / "spool")
        for key in keys.order_by("organization__name", "prefix")
    ]
    if not owners:
        raise SystemExit("no scale-org key: fill the database first")
    return owners


class RunMaker:
    """The gateway's rows for a stream (`gateway_run`'s shape, every field the gateway records),
    drawn as the fill draws its runs: organization, key and end user together, one of the
    models, a prompt and a reply from the same vocabulary. So the runs the writer adds while the
    pages are timed are found by their filters and searches as the filled ones are."""

    def __init__(self, owners: list[Owner]) -> None:
        from .fill import PROMPT_WORDS, REPLY_WORDS
        from .vocabulary import texts

        self.owners = owners
        self.prompts = texts(2000, PROMPT_WORDS, seed=3)
        self.replies = texts(2000, REPLY_WORDS, seed=4)
        self.draw = random.Random(13)

    def rows(self, now: datetime) -> list[WriterItem]:
        """A stream's rows in the order the gateway submits them: open, chunks, close."""
        opened, chunks, closed = self.run(now)
        return [opened, *chunks, closed]

    def run(self, now: datetime) -> tuple[RunOpened, list[ChunkSent], RunClosed]:
        """A stream's rows: its open, its chunks and its close."""
        import orjson

        from bench.micro.writer.batches import gateway_run

        from .fill import END_USERS, KEYS_PER_ORGANIZATION, MODELS, ORGANIZATIONS, SYSTEM_PROMPTS

        draw = self.draw
        end_user = draw.randrange(END_USERS)
        organization = end_user % ORGANIZATIONS
        owner = self.owners[
            (organization * KEYS_PER_ORGANIZATION + draw.randrange(KEYS_PER_ORGANIZATION))
            % len(self.owners)
        ]
        model_n = draw.randrange(len(MODELS))
        model, deployment = MODELS[model_n]
        opened, chunks, closed = gateway_run(owner, now)
        body = orjson.dumps(
            {
                "model": model,
                "stream": True,
                "messages": [
                    {"role": "system", "content": SYSTEM_PROMPTS[model_n]},
                    {"role": "user", "content": draw.choice(self.prompts)},
                ],
            }
        )
        opened.fields.update(
            {
                "request_body": body,
                "request_bytes": len(body),
                "end_user": f"user-{end_user}",
                "model": model,
                "deployment": deployment,
            }
        )
        closed.fields["reply_text"] = draw.choice(self.replies)
        return opened, chunks, closed


def _writer() -> RunWriter:
    from django.conf import settings

    from telemetry.store.writer import RunWriter

    return RunWriter(
        batch_size=settings.MORTAR_WRITER_BATCH_SIZE,
        interval=settings.MORTAR_WRITER_INTERVAL_MS / 1000,
    )


async def steady(rate: int) -> SteadyReport:
    """Submit `rate` rows a second until SIGTERM, then wait until all are written."""
    maker = RunMaker(await asyncio.to_thread(_owners))
    writer = _writer()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    pending: list[WriterItem] = []
    submitted = 0
    lags: list[float] = []
    depths: list[int] = []
    started = time.perf_counter()
    next_sample = started
    while not stop.is_set():
        now = time.perf_counter()
        due = int((now - started) * rate) - submitted
        for _ in range(due):
            if not pending:
                pending = maker.rows(datetime.now(UTC))[::-1]
            writer.submit(pending.pop())
        submitted += max(due, 0)
        if now >= next_sample:
            lags.append(writer.lag_seconds)
            depths.append(writer.depth)
            next_sample = now + SAMPLE_SECONDS
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.005)
    submitting = time.perf_counter() - started
    # What reached the database while the rows came: not what waits in the queue or the spool.
    behind = writer.depth + writer.spooled
    written = submitted - behind
    # A writer far behind would take minutes to catch up: what it has not written by now is
    # left in its spool (removed with this process's directory).
    await writer.close(write_for=5)
    lags.sort()
    return {
        "rate": rate,
        "rows": submitted,
        "written": written,
        "behind_at_end": behind,
        "seconds": submitting,
        "rows_per_second": written / submitting if submitting else 0.0,
        "lag_p95_seconds": lags[int(len(lags) * 0.95)] if lags else 0.0,
        "lag_max_seconds": lags[-1] if lags else 0.0,
        "depth_max": max(depths, default=0),
        "spilled": writer.spilled_total,
    }


async def burst(streams: int) -> BurstReport:
    """`streams` streams' rows, made first, then submitted as a busy worker would (at most
    QUEUE_CAP rows queued); time until all are written."""
    maker = RunMaker(await asyncio.to_thread(_owners))
    now = datetime.now(UTC)
    items: list[WriterItem] = []
    for _ in range(streams):
        items += maker.rows(now)
    writer = _writer()
    # One run first: the writer's thread connects and its statements are prepared.
    for item in maker.rows(now):
        writer.submit(item)
    await writer.flush()
    started = time.perf_counter()
    for n, item in enumerate(items):
        writer.submit(item)
        if n % 1000 == 999:
            await asyncio.sleep(0)
            while writer.depth > QUEUE_CAP:  # noqa: ASYNC110 (polling is the point)
                await asyncio.sleep(0.001)
    await writer.flush()
    seconds = time.perf_counter() - started
    await writer.close()
    return {
        "streams": streams,
        "rows": len(items),
        "seconds": seconds,
        "rows_per_second": len(items) / seconds,
        "spilled": writer.spilled_total,
    }
