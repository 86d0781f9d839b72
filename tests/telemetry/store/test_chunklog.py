"""The run writer's crash log (`telemetry.store.chunklog`): framing, acknowledgment, claiming.

A dead writer is a real process killed with SIGKILL after appending to its log, so its locks go
the way a crashed worker's do; claimers are real processes too.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from telemetry.store import chunklog
from telemetry.store.chunklog import MAGIC, SEGMENT_HEADER, ChunkLog, claim_lock, claim_orphans
from telemetry.store.items import encode_row
from telemetry.store.spool import Spool
from telemetry.store.writer import RunWriter
from tests.conftest import Tenant
from tests.support.servers import ROOT
from tests.telemetry.store.test_writer import assert_stored, run_rows

OPENED = ("o", {"id": "chatcmpl-a", "accepted_at": datetime(2026, 1, 2, tzinfo=UTC)})


def chunk(n: int) -> tuple[str, int, int, bytes]:
    return ("chatcmpl-a", n, n * 1000, f"data: {n}\n\n".encode())


def as_row(c: tuple[str, int, int, bytes]) -> tuple:
    return ("c", *c)


def die_after_logging(directory: Path, *, chunks: int, acked: int, passes: int = 1) -> None:
    """Log a run and `chunks` chunks in a process of its own, over `passes` loop passes (0: all
    in the pass it dies in), acknowledge the first `acked` rows, and SIGKILL the process (its
    locks go as a crashed worker's do)."""
    die_after_logging_rows(
        directory, [OPENED, *(as_row(chunk(n)) for n in range(chunks))], acked, passes
    )


DYING_WRITER = """
import asyncio, os, pickle, signal, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from telemetry.store.chunklog import ChunkLog

async def main():
    rows, acked, passes = pickle.loads(Path({actions!r}).read_bytes())
    log = ChunkLog(Path({directory!r}))
    per_pass = max(1, len(rows) // passes) if passes else len(rows) + 1
    for n, row in enumerate(rows):
        if row[0] == "c":
            log.append_chunk(row[1:])
        else:
            log.append_row(row)
        if (n + 1) % per_pass == 0:
            await asyncio.sleep(0)  # a loop pass
    log.ack(acked)
    if passes:
        await asyncio.sleep(0)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


def die_after_logging_rows(directory: Path, rows: list[tuple], acked: int, passes: int) -> None:
    actions = directory.with_name(f"{directory.name}-actions.pickle")
    actions.write_bytes(pickle.dumps((rows, acked, passes)))
    script = DYING_WRITER.format(root=str(ROOT), actions=str(actions), directory=str(directory))
    process = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=30)
    assert process.returncode == -9, process.stderr.decode()


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.seg"))


def replayed(directory: Path) -> list[tuple]:
    with claim_lock(directory):
        orphans = claim_orphans(directory)
        orphans.remove()
    return orphans.rows


def test_a_dead_writers_unacknowledged_rows_are_replayed_in_order(tmp_path: Path) -> None:
    die_after_logging(tmp_path, chunks=9, acked=4, passes=3)

    # Rows 0 (the run) to 3 were stored; 4 onwards were not.
    assert replayed(tmp_path) == [as_row(chunk(n)) for n in range(3, 9)]
    assert not segments(tmp_path)  # replayed once: gone
    assert replayed(tmp_path) == []


def test_a_dead_writer_with_nothing_acknowledged_is_replayed_whole(tmp_path: Path) -> None:
    die_after_logging(tmp_path, chunks=3, acked=0)

    assert replayed(tmp_path) == [OPENED, *(as_row(chunk(n)) for n in range(3))]


def test_a_row_is_in_the_log_as_soon_as_it_is_appended(tmp_path: Path) -> None:
    # Killed in the very loop pass that appended them: nothing waited for the pass to end.
    die_after_logging(tmp_path, chunks=7, acked=2, passes=0)

    assert replayed(tmp_path) == [as_row(chunk(n)) for n in range(1, 7)]


def test_a_segment_too_small_for_a_row_is_made_big_enough(tmp_path: Path) -> None:
    big = ("chatcmpl-a", 0, 0, b"x" * 5000)

    async def scenario() -> None:
        log = ChunkLog(tmp_path, segment_bytes=100)
        log.append_chunk(chunk(0))
        log.append_chunk(big)
        log.append_chunk(chunk(2))
        log.ack(1)
        log.close()

    asyncio.run(scenario())
    assert replayed(tmp_path) == [as_row(big), as_row(chunk(2))]


@pytest.mark.parametrize("damage", ["cut short", "a byte changed"])
def test_a_torn_last_record_is_left_out_and_the_rest_replayed(tmp_path: Path, damage: str) -> None:
    die_after_logging(tmp_path, chunks=5, acked=0)
    (segment,) = tmp_path.glob("*.seg")
    data = segment.read_bytes()
    # The last record is chunk 4's (acknowledging 0 rows writes nothing).
    last = data.rindex(b"data: 4")
    if damage == "cut short":
        segment.write_bytes(data[: last + 3])  # kill -9 in the middle of a write
    else:
        segment.write_bytes(data[:last] + b"X" + data[last + 1 :])

    assert replayed(tmp_path) == [OPENED, *(as_row(chunk(n)) for n in range(4))]


def test_rows_the_disk_refused_are_a_gap_and_the_rows_after_keep_their_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunklog, "RETRY_SECONDS", 0.0)  # try again at the next row
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the log's directory should be")
    directory = blocker / "log"

    log = ChunkLog(directory)
    log.append_chunk(chunk(0))  # no segment can be made: unlogged, yet counted
    log.append_chunk(chunk(1))
    blocker.unlink()  # the disk takes them again
    log.append_chunk(chunk(2))
    log.append_chunk(chunk(3))
    log.ack(3)  # rows 0 to 2 are stored
    log.close()  # row 3 is not: left for the next writer

    assert replayed(directory) == [as_row(chunk(3))]


def test_a_file_that_is_no_segment_is_not_replayed(tmp_path: Path) -> None:
    (tmp_path / "log-1-2-3-000001.seg").write_bytes(b"not a log at all")

    assert replayed(tmp_path) == []


def test_acknowledged_segments_are_deleted_as_the_log_grows(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = ChunkLog(tmp_path, segment_bytes=100)
        for n in range(20):
            log.append_chunk(chunk(n))
            await asyncio.sleep(0)  # each chunk in a loop pass of its own
        written = segments(tmp_path)
        assert len(written) >= 5  # rotated as they filled, none acknowledged yet
        first_seqs = [SEGMENT_HEADER.unpack_from(p.read_bytes())[1] for p in written]
        assert first_seqs == sorted(first_seqs) and first_seqs[0] == 0

        log.ack(10)
        left = segments(tmp_path)
        assert 0 < len(left) < len(written)
        # What is left still holds every row from 10 on.
        assert min(SEGMENT_HEADER.unpack_from(p.read_bytes())[1] for p in left) <= 10

        log.ack(20)
        await asyncio.sleep(0)
        assert len(segments(tmp_path)) <= 1  # only the one being appended to
        assert log.unacknowledged == 0
        log.close()
        assert segments(tmp_path) == []

    asyncio.run(scenario())


def test_a_log_closed_with_rows_not_stored_is_left_for_the_next_writer(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = ChunkLog(tmp_path)
        for n in range(6):
            log.append_chunk(chunk(n))
        log.ack(2)
        log.close()  # the writer could not store rows 2 to 5 (the disk refused its spool)
        log.append_chunk(chunk(6))  # rows after close are not logged

    asyncio.run(scenario())
    assert replayed(tmp_path) == [as_row(chunk(n)) for n in range(2, 6)]


def test_a_live_writers_log_is_never_claimed(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = ChunkLog(tmp_path)
        log.append_chunk(chunk(0))
        await asyncio.sleep(0)
        assert replayed(tmp_path) == []  # locked by its writer (this process, another file)
        assert len(segments(tmp_path)) == 1
        log.ack(1)
        log.close()

    asyncio.run(scenario())
    assert segments(tmp_path) == []


CLAIMER = """
import json, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from telemetry.store.chunklog import claim_lock, claim_orphans

directory = Path({directory!r})
with claim_lock(directory):
    orphans = claim_orphans(directory)
    orphans.remove()
print(json.dumps([row[2] for row in orphans.rows if row[0] == "c"]))
"""


def test_writers_starting_together_never_replay_a_log_twice(tmp_path: Path) -> None:
    for _ in range(3):
        die_after_logging(tmp_path, chunks=50, acked=0, passes=5)
    assert len(segments(tmp_path)) == 3

    script = CLAIMER.format(root=str(ROOT), directory=str(tmp_path))
    claimers = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE) for _ in range(4)
    ]
    claimed = [json.loads(claimer.communicate(timeout=30)[0]) for claimer in claimers]

    assert sorted(len(seqs) for seqs in claimed) == [0, 0, 0, 150]  # all by the first claimer
    assert sorted(next(seqs for seqs in claimed if seqs)) == sorted(list(range(50)) * 3)
    assert segments(tmp_path) == []


def test_a_segment_starts_with_its_magic_and_first_row_number(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = ChunkLog(tmp_path)
        log.append_chunk(chunk(0))
        await asyncio.sleep(0)
        (segment,) = segments(tmp_path)
        assert SEGMENT_HEADER.unpack_from(segment.read_bytes()) == (MAGIC, 0)
        log.ack(1)
        log.close()

    asyncio.run(scenario())


def plain(value: object) -> object:
    return str(value) if isinstance(value, str) else value


# The run writer: what a dead worker spooled goes first, then what only its log holds.


@pytest.mark.django_db
def test_a_new_writer_stores_a_dead_writers_spool_then_its_log(
    tenant: Tenant, tmp_path: Path
) -> None:
    run_id, items, data = run_rows(tenant.organization.id, 10)
    # Opened, 10 chunks, closed; statuses as plain str, for a process without Django's models.
    rows = [
        tuple(
            {k: plain(v) for k, v in part.items()} if isinstance(part, dict) else part
            for part in row
        )
        for row in map(encode_row, items)
    ]
    # The dead writer spooled its first 6 rows (the database was away), acknowledged them in
    # its log, and died holding the other 6 in memory.
    dead_spool = Spool(tmp_path / "spool")
    dead_spool.append([rows[:6]], time.time())
    dead_spool.close()  # unlocked, as a dead process's
    die_after_logging_rows(tmp_path / "spool-log", rows, acked=6, passes=3)

    async def scenario() -> None:
        writer = RunWriter(batch_size=100, interval=0.01, spool_dir=tmp_path / "spool")
        writer.start()  # claims what the dead writer left, first thing
        await writer.close()  # and writes it all before it returns

    asyncio.run(scenario())
    # Had the log gone first, the outcome would have met no row and the chunks no run.
    assert_stored(run_id, data, 10)
    assert sorted(p.name for p in (tmp_path / "spool").glob("*.bin")) == []
    assert segments(tmp_path / "spool-log") == []


@pytest.mark.django_db
def test_a_writer_that_stored_everything_leaves_no_log(tenant: Tenant, tmp_path: Path) -> None:
    run_id, items, data = run_rows(tenant.organization.id, 30)

    async def scenario() -> None:
        writer = RunWriter(batch_size=10, interval=0.01, spool_dir=tmp_path / "spool")
        for item in items:
            writer.submit(item)
        await asyncio.sleep(0)
        assert len(segments(tmp_path / "spool-log")) == 1  # logged
        await writer.flush()
        await writer.close()

    asyncio.run(scenario())
    assert_stored(run_id, data, 30)
    assert segments(tmp_path / "spool-log") == []
