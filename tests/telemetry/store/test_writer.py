"""The run writer: batches, the spool, replays, and what it does while the database is away.

The writer writes on a thread of its own with its own connection and commits, so what it
writes is committed even though the test's own connection sits in a transaction; every test
uses fresh run ids and the session's committed organization (`tenant`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import IntegrityError, OperationalError, transaction

from accounts.models import Organization
from telemetry.models import Run, RunChunk
from telemetry.store import running
from telemetry.store import writer as writer_module
from telemetry.store.batches import write_batch
from telemetry.store.items import (
    ChunkSent,
    RunClosed,
    RunOpened,
    WriterItem,
    decode_row,
    encode_row,
)
from telemetry.store.spool import HEADER, MAGIC, Spool
from telemetry.store.writer import RunWriter
from tests.conftest import Tenant, stored_bytes
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.django_db


def run_rows(organization_id: int, chunks: int) -> tuple[str, list[WriterItem], bytes]:
    """A completed run's writer items, as the recorder submits them, and the bytes it sent."""
    run_id = f"chatcmpl-{secrets.token_hex(12)}"
    opened = RunOpened(
        {
            "id": run_id,
            "organization_id": organization_id,
            "accepted_at": datetime.now(UTC),
            "status": Run.Status.IN_PROGRESS,
            "request_body": b'{"messages": []}',
            "usage": {"prompt_tokens": 3},
        }
    )
    sent = [
        ChunkSent(run_id, seq, seq * 1000, f"data: {run_id} {seq}\n\n".encode())
        for seq in range(chunks)
    ]
    closed = RunClosed(
        run_id,
        {"status": Run.Status.COMPLETED, "finished_at": datetime.now(UTC), "chunk_count": chunks},
    )
    return run_id, [opened, *sent, closed], b"".join(item.data for item in sent)


def refused_run_rows(chunks: int) -> tuple[str, list[WriterItem]]:
    """A run's writer items whose open the database refuses (its organization does not exist)."""
    run_id, rows, _ = run_rows(2_000_000_000, chunks)
    return run_id, rows


def interleave(*runs: list[WriterItem]) -> list[WriterItem]:
    """Rows of several runs in the order concurrent streams would submit them."""
    merged: list[WriterItem] = []
    for i in range(max(len(rows) for rows in runs)):
        merged.extend(rows[i] for rows in runs if i < len(rows))
    return merged


def assert_stored(run_id: str, data: bytes, chunks: int) -> None:
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.COMPLETED
    assert run.chunk_count == chunks
    assert run.chunks.count() == chunks
    assert stored_bytes(run) == data


def drive(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


class Outage:
    """Make the writer's database look away (the way a dropped connection fails a batch)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.down = False
        self.attempts = 0
        real_write, real_reachable = writer_module.write_batch, writer_module.database_reachable

        def write(items, *, replay=False):  # type: ignore[no-untyped-def]
            self.attempts += 1
            if self.down:
                raise OperationalError("server closed the connection unexpectedly")
            real_write(items, replay=replay)

        monkeypatch.setattr(writer_module, "write_batch", write)
        monkeypatch.setattr(
            writer_module, "database_reachable", lambda: not self.down and real_reachable()
        )


def spool_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*")) if directory.exists() else []


# Writing.


def test_it_writes_every_run_and_chunk_across_batches(tenant: Tenant, tmp_path: Path) -> None:
    runs = [run_rows(tenant.organization.id, chunks) for chunks in (0, 1, 7, 40, 120)]

    async def scenario() -> None:
        writer = RunWriter(batch_size=25, interval=0.01, spool_dir=tmp_path)
        for item in interleave(*(rows for _, rows, _ in runs)):
            writer.submit(item)
        await writer.flush()
        assert writer.depth == 0
        await writer.close()

    drive(scenario)
    for run_id, rows, data in runs:
        assert_stored(run_id, data, len(rows) - 2)
    assert spool_files(tmp_path) == []


def test_a_writer_behind_catches_up_in_bigger_transactions(tenant: Tenant, tmp_path: Path) -> None:
    """More than a batch queued is taken up to CATCH_UP_BATCHES batches at a time (each batch
    costs a trip through the loop whatever its size); a batch's worth or less, as it comes."""
    runs = [run_rows(tenant.organization.id, 60) for _ in range(20)]  # 1,240 rows
    written: list[int] = []

    class CountingWriter(RunWriter):
        def _write(self, items, replay):  # type: ignore[no-untyped-def]
            written.append(len(items))
            super()._write(items, replay)

    async def scenario() -> None:
        writer = CountingWriter(batch_size=25, interval=0.01, spool_dir=tmp_path)
        for item in interleave(*(rows for _, rows, _ in runs)):
            writer.submit(item)  # all queued before the writer's first pass: it is behind
        await writer.flush()
        ids, rows, data = run_rows(tenant.organization.id, 3)
        for item in rows:  # 5 rows: less than a batch
            writer.submit(item)
        await writer.flush()
        await writer.close()
        runs.append((ids, rows, data))

    drive(scenario)
    most = 25 * writer_module.CATCH_UP_BATCHES
    assert len(written) < 1240 // 25  # fewer transactions than batches
    assert written == [most] * (1240 // most) + [1240 % most, 5]
    for run_id, rows, data in runs:
        assert_stored(run_id, data, len(rows) - 2)


def test_a_run_the_database_refuses_does_not_block_the_others(
    tenant: Tenant, tmp_path: Path
) -> None:
    good_id, good, good_data = run_rows(tenant.organization.id, 5)
    bad_id, bad = refused_run_rows(5)

    async def scenario() -> None:
        writer = RunWriter(batch_size=1000, interval=0.01, spool_dir=tmp_path)
        for item in interleave(good, bad):
            writer.submit(item)
        await writer.close()

    drive(scenario)
    assert_stored(good_id, good_data, 5)
    assert not Run.objects.filter(pk=bad_id).exists()
    assert not RunChunk.objects.filter(run_id=bad_id).exists()


@pytest.mark.parametrize("replay", [False, True])
def test_a_chunk_whose_run_is_not_stored_is_refused(tenant: Tenant, replay: bool) -> None:
    """No foreign key holds chunks to their runs (telemetry migration 0019): a check in the
    database (in Postgres) or in the writer (SQLite) refuses them as it did."""
    run_id, rows, _ = run_rows(tenant.organization.id, 3)
    stray = ChunkSent(f"chatcmpl-{secrets.token_hex(12)}", 0, 0, b"data: {}\n\n")
    write_batch(rows[:1])  # the run is stored: its chunks go in, with or without the stray's
    write_batch(rows[1:3], replay=replay)
    with pytest.raises(IntegrityError), transaction.atomic():
        write_batch([rows[3], stray], replay=replay)
    assert not RunChunk.objects.filter(run_id=stray.run_id).exists()
    assert list(RunChunk.objects.filter(run_id=run_id).values_list("seq", flat=True)) == [0, 1]


def test_the_chunks_of_a_run_refused_in_an_earlier_batch_are_dropped_not_orphaned(
    tenant: Tenant, tmp_path: Path
) -> None:
    good_id, good, good_data = run_rows(tenant.organization.id, 4)
    bad_id, bad = refused_run_rows(4)

    async def scenario() -> None:
        writer = RunWriter(batch_size=1000, interval=0.01, spool_dir=tmp_path)
        writer.submit(bad[0])  # refused alone, in a batch of its own
        await writer.flush()
        for item in interleave(good, bad[1:]):  # its chunks and close come in the next one
            writer.submit(item)
        await writer.close()

    drive(scenario)
    assert_stored(good_id, good_data, 4)
    assert not Run.objects.filter(pk=bad_id).exists()
    assert not RunChunk.objects.filter(run_id=bad_id).exists()


def test_deleting_an_organization_deletes_its_runs_and_their_chunks() -> None:
    organization = Organization.objects.create(name=f"leaving-{secrets.token_hex(4)}")
    run_id, rows, _ = run_rows(organization.id, 5)
    write_batch(rows)
    assert RunChunk.objects.filter(run_id=run_id).count() == 5

    organization.delete()

    assert not Run.objects.filter(pk=run_id).exists()
    assert not RunChunk.objects.filter(run_id=run_id).exists()


def test_replaying_a_written_batch_adds_nothing_and_does_not_fail(tenant: Tenant) -> None:
    run_id, rows, data = run_rows(tenant.organization.id, 30)
    write_batch(rows)
    write_batch(rows, replay=True)
    write_batch(rows[10:20], replay=True)
    assert_stored(run_id, data, 30)
    assert Run.objects.filter(pk=run_id).count() == 1


def test_a_replayed_close_applies_even_when_the_run_is_already_there(tenant: Tenant) -> None:
    # The first try committed the open and half the chunks, but its acknowledgment was lost;
    # the replay carries the open again, all chunks and the close in one batch.
    run_id, rows, data = run_rows(tenant.organization.id, 10)
    write_batch(rows[:6])
    assert Run.objects.get(pk=run_id).status == Run.Status.IN_PROGRESS
    write_batch(rows, replay=True)
    assert_stored(run_id, data, 10)


def test_the_spool_row_format_keeps_every_value() -> None:
    when = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    items: list[WriterItem] = [
        RunOpened(
            {"id": "r", "accepted_at": when, "request_body": b"\x00\xff", "usage": {"a": [1]}}
        ),
        ChunkSent("r", 3, 123456, b"data: \x00\n\n"),
        RunClosed("r", {"status": "completed", "finished_at": when, "first_token_at": None}),
    ]
    assert [decode_row(encode_row(item)) for item in items] == items


def test_an_opened_row_spooled_with_its_budget_draw_apart_is_read_into_its_fields() -> None:
    """Before the draw was part of the run's fields (telemetry migration 0018), a spool or a
    crash log carried it as the opened row's fourth value: such a row still takes its draw."""
    fields = {"id": "r", "held_usd": Decimal("0.004"), "budget_slice": None}
    draw = ("r", "slice-abc-1", Decimal("0.004"), Decimal("0.001"))
    assert decode_row(("o", fields, [], draw)) == RunOpened(
        {
            "id": "r",
            "held_usd": Decimal("0.004"),
            "budget_slice": "slice-abc-1",
            "held_prompt_usd": Decimal("0.001"),
        }
    )


# The spool.


def test_the_spool_gives_batches_back_in_order_and_deletes_a_drained_file(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([[("c", "a", 0, 0, b"0"), ("c", "a", 1, 0, b"1")], [("c", "a", 2, 0, b"2")]], 1.0)
    spool.append([[("c", "a", 3, 0, b"3")]], 2.0)
    assert spool.pending == 4
    assert spool.oldest_at == 1.0
    (path,) = tmp_path.glob("spool-*.bin")
    assert path.name.startswith(f"spool-{os.getpid()}-")
    assert path.read_bytes().startswith(MAGIC)

    seen = []
    while (batch := spool.head()) is not None:
        assert spool.head() is batch  # the same batch until it is written
        seen.append([row[2] for row in batch])
        spool.advance()
    assert seen == [[0, 1], [2], [3]]
    assert spool.pending == 0
    assert spool_files(tmp_path) == []

    spool.append([[("c", "a", 4, 0, b"4")]], 3.0)  # a new file once the old one is gone
    assert spool.head() == [("c", "a", 4, 0, b"4")]
    spool.close()
    assert len(spool_files(tmp_path)) == 1


def test_a_live_writers_file_is_never_claimed(tmp_path: Path) -> None:
    alive = Spool(tmp_path)
    alive.append([[("c", "a", 0, 0, b"0")]], 1.0)
    other = Spool(tmp_path)
    assert other.claim_orphans() == 0
    assert other.pending == 0

    alive.close()  # as if its process died: the lock goes, the file stays
    assert other.claim_orphans() == 1
    assert Spool(tmp_path).claim_orphans() == 0  # claimed files are locked by their claimer
    (claimed,) = tmp_path.glob("*.bin")
    assert claimed.name.startswith(f"claimed-{os.getpid()}-")
    assert other.head() == [("c", "a", 0, 0, b"0")]


def test_a_claim_ignores_a_torn_last_record(tmp_path: Path) -> None:
    dead = Spool(tmp_path)
    dead.append([[("c", "a", 0, 0, b"0")], [("c", "a", 1, 0, b"1")]], 1.0)
    dead.close()
    (path,) = tmp_path.glob("*.bin")
    whole = path.stat().st_size
    with path.open("ab") as f:  # the process died while appending a third record
        f.write(HEADER.pack(1000, 0, 5, 2.0) + b"partial")
    assert path.stat().st_size > whole

    spool = Spool(tmp_path)
    assert spool.claim_orphans() == 2
    assert spool.head() == [("c", "a", 0, 0, b"0")]
    spool.advance()
    assert spool.head() == [("c", "a", 1, 0, b"1")]
    spool.advance()
    assert spool.head() is None
    assert spool_files(tmp_path) == []


def test_a_damaged_record_ends_the_file_which_is_kept_aside(tmp_path: Path) -> None:
    dead = Spool(tmp_path)
    dead.append([[("c", "a", 0, 0, b"0")], [("c", "a", 1, 0, b"1")]], 1.0)
    dead.close()
    (path,) = tmp_path.glob("*.bin")
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # a flipped bit in the second record's payload
    path.write_bytes(bytes(data))

    spool = Spool(tmp_path)
    assert spool.claim_orphans() == 2  # its header is intact
    assert spool.head() == [("c", "a", 0, 0, b"0")]
    spool.advance()
    assert spool.head() is None
    assert spool.pending == 0
    (kept,) = spool_files(tmp_path)
    assert kept.startswith("damaged-claimed-") and kept.endswith(".spool")


# Outages.


def test_a_writer_drains_a_leftover_spool_file_at_start(tenant: Tenant, tmp_path: Path) -> None:
    run_id, rows, data = run_rows(tenant.organization.id, 12)
    dead = Spool(tmp_path)
    dead.append(
        [[encode_row(item) for item in rows[:5]], [encode_row(item) for item in rows[5:]]], 1.0
    )
    dead.close()

    async def scenario() -> None:
        writer = RunWriter(batch_size=100, interval=0.01, spool_dir=tmp_path)
        writer.start()
        # The drained file is deleted on the writer's thread a moment before its counter is
        # refreshed: wait for both (a counter stuck above 0 fails the wait).
        await wait_until_async(lambda: not spool_files(tmp_path) and writer.spooled == 0)
        assert writer.spooled == 0
        await writer.close()

    drive(scenario)
    assert_stored(run_id, data, 12)


def test_while_the_database_is_away_rows_go_to_the_spool_and_come_back(
    tenant: Tenant, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outage = Outage(monkeypatch)
    before = [run_rows(tenant.organization.id, 20) for _ in range(3)]
    during = [run_rows(tenant.organization.id, 20) for _ in range(3)]

    async def scenario() -> None:
        writer = RunWriter(batch_size=10, interval=0.01, spool_dir=tmp_path)
        running.run_writer.set(writer)
        try:
            outage.down = True
            for item in interleave(*(rows for _, rows, _ in before)):
                writer.submit(item)
            # Everything queued moves to the spool, so memory doesn't grow with the outage.
            await wait_until_async(lambda: writer.spooled == 66 and writer.depth == 0)
            for item in interleave(*(rows for _, rows, _ in during)):
                writer.submit(item)
            await wait_until_async(lambda: writer.spooled == 132, within=15)
            status = running.writer_status()
            assert status["queue_depth"] == 0
            assert status["spooled"] == 132
            assert status["last_error"]["message"] == (
                "OperationalError: server closed the connection unexpectedly"
            )
            assert len(spool_files(tmp_path)) == 1

            outage.down = False
            await writer.flush()
            assert writer.spooled == 0
            assert running.writer_status()["lag_seconds"] == 0
            assert spool_files(tmp_path) == []
        finally:
            running.run_writer.pop()
            await writer.close()

    drive(scenario)
    assert outage.attempts > 2
    for run_id, _, data in before + during:
        assert_stored(run_id, data, 20)


def test_close_leaves_what_it_cannot_write_in_the_spool_for_the_next_start(
    tenant: Tenant, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outage = Outage(monkeypatch)
    # Were close to wait for the database instead of giving up after `write_for`, only the
    # stuck-call timeout would end it: far past the deadline below.
    monkeypatch.setattr(writer_module, "STUCK_SECONDS", 600.0)
    run_id, rows, data = run_rows(tenant.organization.id, 15)

    async def down_then_close() -> None:
        writer = RunWriter(batch_size=100, interval=0.01, spool_dir=tmp_path)
        outage.down = True
        for item in rows:
            writer.submit(item)
        # The database stays down: close gives up on it after `write_for`.
        await asyncio.wait_for(writer.close(write_for=0.5), timeout=60)

    drive(down_then_close)
    assert not Run.objects.filter(pk=run_id).exists()
    assert len(spool_files(tmp_path)) == 1

    outage.down = False

    async def next_start() -> None:
        writer = RunWriter(batch_size=100, interval=0.01, spool_dir=tmp_path)
        writer.start()
        await wait_until_async(lambda: not spool_files(tmp_path))
        await writer.close()

    drive(next_start)
    assert_stored(run_id, data, 15)


def test_a_close_stuck_in_a_database_call_spools_the_queue_aside(
    tenant: Tenant, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A network that drops packets: the writer's database call neither ends nor fails.
    monkeypatch.setattr(writer_module, "STUCK_SECONDS", 0.2)
    real_write = writer_module.write_batch
    released = threading.Event()

    entered = threading.Event()
    returned = threading.Event()
    calls: list[threading.Thread] = []

    def hang(items, *, replay=False):  # type: ignore[no-untyped-def]
        calls.append(threading.current_thread())
        entered.set()
        try:
            released.wait(60)
            raise OperationalError("server closed the connection unexpectedly")
        finally:
            returned.set()

    monkeypatch.setattr(writer_module, "write_batch", hang)
    run_id, rows, data = run_rows(tenant.organization.id, 8)

    async def stuck_then_close() -> None:
        writer = RunWriter(batch_size=100, interval=0.01, spool_dir=tmp_path)
        for item in rows:
            writer.submit(item)
        await wait_until_async(entered.is_set, message="the batch never reached the database")
        await writer.close(write_for=0.1)
        # Close came back while the database call still hangs: it did not wait for it.
        assert not returned.is_set()
        released.set()
        # The writer's thread comes back (and hands its error to the loop) while the loop runs.
        await wait_until_async(lambda: not calls[0].is_alive(), message="the thread hangs on")
        await asyncio.sleep(0)

    drive(stuck_then_close)
    assert len(spool_files(tmp_path)) == 1
    monkeypatch.setattr(writer_module, "write_batch", real_write)

    async def next_start() -> None:
        writer = RunWriter(batch_size=100, interval=0.01, spool_dir=tmp_path)
        writer.start()
        await wait_until_async(lambda: not spool_files(tmp_path))
        await writer.close()

    drive(next_start)
    assert_stored(run_id, data, 8)


def test_a_writer_far_behind_spools_and_still_writes_everything_in_order(
    tenant: Tenant, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [run_rows(tenant.organization.id, 30) for _ in range(20)]
    appended: list[int] = []
    real_append = Spool.append

    def append(self: Spool, batches, queued_at):  # type: ignore[no-untyped-def]
        appended.append(sum(len(batch) for batch in batches))
        real_append(self, batches, queued_at)

    monkeypatch.setattr(Spool, "append", append)

    async def scenario() -> None:
        writer = RunWriter(batch_size=50, interval=0.01, spool_dir=tmp_path, spill_at=100)
        for item in interleave(*(rows for _, rows, _ in runs)):
            writer.submit(item)  # 640 rows at once: more than `spill_at`
        await writer.flush()
        await writer.close()
        assert writer.spilled_total == sum(appended)  # what /readyz reports as spilled_total

    drive(scenario)
    assert appended and sum(appended) >= 100
    for run_id, _, data in runs:
        assert_stored(run_id, data, 30)
    assert spool_files(tmp_path) == []


def test_status_reports_depth_lag_and_spooled_rows(tenant: Tenant, settings) -> None:
    settings.MORTAR_WRITER_INTERVAL_MS = 10_000  # a lone row waits for its batch to fill
    run_id, rows, _ = run_rows(tenant.organization.id, 0)

    async def scenario() -> None:
        assert running.writer_status() == {
            "queue_depth": 0,
            "lag_seconds": 0.0,
            "spooled": 0,
            "spilled_total": 0,
            "last_error": None,
        }
        submitted = time.monotonic()
        running.run_writer().submit(rows[0])
        # The lag grows while the lone row waits for its batch …
        status = await wait_until_async(
            lambda: (now := running.writer_status())["lag_seconds"] >= 0.3 and now
        )
        waited = time.monotonic() - submitted
        assert status["queue_depth"] == 1
        # … and is never more than the row has waited (reported to the millisecond).
        assert 0.3 <= status["lag_seconds"] <= round(waited, 3) + 0.001
        assert status["spooled"] == 0
        assert status["last_error"] is None
        await running.close_run_writer()  # writes it, without waiting for the batch
        assert running.writer_status()["queue_depth"] == 0

    drive(scenario)
    assert Run.objects.filter(pk=run_id).exists()
