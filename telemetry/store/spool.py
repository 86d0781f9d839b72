"""The run writer's spool: append-only files that hold rows while the database is away.

Each worker process appends to a file of its own, ``<VAR_DIR>/spool/spool-<pid>-<ms>-<n>.bin``
(made as ``.new`` and renamed once locked), and holds an exclusive ``flock`` on every file it
owns until it has drained it; the kernel drops the lock when the process dies. A writer
starting up claims the ``*.bin`` files of dead processes (those it can lock) by renaming them
to ``claimed-<its pid>-<ms>-<n>.bin`` — the rename is atomic, so two processes never drain the
same file — and drains them like its own. A drained file is deleted; a damaged one is renamed
``damaged-….spool`` and left for someone to look at.

File format (version 1), little-endian::

    file    := MAGIC record*
    MAGIC   := b"MRTSPL\x00\x01"                                      (8 bytes)
    record  := header payload
    header  := u32 payload length, u32 CRC-32 of the payload, u32 number of rows,
               f64 wall-clock time (Unix seconds) the oldest row was queued  (20 bytes)
    payload := pickle (protocol 5) of a list of rows

A row is a tuple of plain values (``telemetry.store.items.encode_row``): ``("o", fields)`` a run
opened (``("o", fields, images)`` when its request carried images, each a tuple of
``telemetry.store.fields.ImageRecord``'s fields), ``("c", run_id, seq, offset_us, data)`` a chunk
sent, ``("x", run_id, fields)`` a run closed, where ``fields`` maps Run field names to str, int,
bool, None, bytes, datetime, Decimal or JSON values.

One record is one batch for the database, and records are drained in order. They are only
appended, and the file is fsync'ed after each append, so a crash can at worst tear the last
record: a reader stops at the first record that is short or fails its CRC. How far a file was
drained is not recorded, so a file claimed after its drainer died is replayed from its start;
the writer's replay path makes that harmless. Pickle is safe here because only this machine's
Mortar processes write under VAR_DIR, which must not be writable by anyone else.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import pickle
import struct
import time
import zlib
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MAGIC = b"MRTSPL\x00\x01"
HEADER = struct.Struct("<IIId")

Row = tuple[Any, ...]

_serials = itertools.count(1)


class SpoolFile:
    """One spool file, locked by this process: append batches, read them back in order."""

    def __init__(self, path: Path, fd: int, *, size: int, read_offset: int, pending: int):
        self.path = path
        self.fd = fd
        self.size = size  # bytes of whole records (a torn tail is never counted)
        self.read_offset = read_offset
        self.pending = pending  # rows not yet written to the database
        self.oldest_at: float | None = None  # wall-clock time of the oldest pending row
        self.damaged = False

    @classmethod
    def create(cls, path: Path) -> SpoolFile:
        # Made under a name claimers ignore, and renamed once locked: a claimer must never
        # lock a new file before its owner does.
        making = path.with_suffix(".new")
        fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, MAGIC)
            os.fsync(fd)
            os.rename(making, path)
            _fsync_directory(path.parent)
        except BaseException:
            os.close(fd)
            making.unlink(missing_ok=True)
            raise
        return cls(path, fd, size=len(MAGIC), read_offset=len(MAGIC), pending=0)

    @classmethod
    def claim(cls, path: Path, claimed_path: Path) -> SpoolFile | None:
        """Take over a dead process's file: lock it, rename it to ours, and count its rows.

        Returns None when the file is still locked (its process lives, or another process
        claimed it first) or is gone.
        """
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            # The lock is ours, but another claimer may have renamed (and even drained and
            # deleted) this file between our open and our lock: only the rename decides.
            os.rename(path, claimed_path)
        except FileNotFoundError:
            os.close(fd)
            return None
        spool = cls(claimed_path, fd, size=0, read_offset=len(MAGIC), pending=0)
        spool._scan()
        return spool

    def _scan(self) -> None:
        """Count the whole records of a claimed file; drop a torn tail from the count."""
        end = os.fstat(self.fd).st_size
        if os.pread(self.fd, len(MAGIC), 0) != MAGIC:
            logger.error("spool %s: not a spool file (bad magic)", self.path)
            self.size = self.read_offset = end
            self.damaged = True
            return
        offset = len(MAGIC)
        while offset + HEADER.size <= end:
            length, _, count, queued_at = HEADER.unpack(os.pread(self.fd, HEADER.size, offset))
            if offset + HEADER.size + length > end:
                break
            if self.oldest_at is None:
                self.oldest_at = queued_at
            self.pending += count
            offset += HEADER.size + length
        if offset != end:
            logger.warning("spool %s: ignoring a torn last record (%d B)", self.path, end - offset)
        self.size = offset

    def append(self, batches: Sequence[list[Row]], queued_at: float) -> None:
        """Append one record per batch, then fsync; on failure leave the file as it was."""
        parts: list[bytes] = []
        rows = 0
        for batch in batches:
            payload, count = _dumps(batch)
            parts.append(HEADER.pack(len(payload), zlib.crc32(payload), count, queued_at))
            parts.append(payload)
            rows += count
        data = b"".join(parts)
        try:
            written = 0
            while written < len(data):
                written += os.write(self.fd, data[written:])
            os.fsync(self.fd)
        except OSError:
            os.ftruncate(self.fd, self.size)  # a half-written record would hide later ones
            raise
        self.size += len(data)
        self.pending += rows
        if self.oldest_at is None:
            self.oldest_at = queued_at

    def read(self) -> tuple[list[Row], int] | None:
        """The oldest unwritten batch and the offset after it, or None at the end."""
        if self.read_offset + HEADER.size > self.size:
            return None
        length, crc, _, _ = HEADER.unpack(os.pread(self.fd, HEADER.size, self.read_offset))
        payload = os.pread(self.fd, length, self.read_offset + HEADER.size)
        rows: list[Row] | None = None
        if len(payload) == length and zlib.crc32(payload) == crc:
            with contextlib.suppress(Exception):  # any failure to unpickle is damage too
                rows = pickle.loads(payload)
        if rows is None:
            logger.error(
                "spool %s: record at %d is damaged; skipping the rest of the file",
                self.path,
                self.read_offset,
            )
            self.size = self.read_offset
            self.pending = 0
            self.damaged = True
            return None
        return rows, self.read_offset + HEADER.size + length

    def advance(self, next_offset: int, rows: int) -> None:
        """Note that the batch read last is in the database."""
        self.read_offset = next_offset
        self.pending -= rows
        if self.read_offset + HEADER.size <= self.size:
            self.oldest_at = HEADER.unpack(os.pread(self.fd, HEADER.size, self.read_offset))[3]
        else:
            self.oldest_at = None

    @property
    def drained(self) -> bool:
        return self.read_offset >= self.size

    def remove(self) -> None:
        """Delete the drained file; unlink before unlocking, so nobody claims it in between.

        A damaged file is renamed aside instead (no longer ``*.bin``, so never claimed again)
        for someone to look at.
        """
        if self.damaged:
            aside = self.path.with_name(f"damaged-{self.path.stem}.spool")
            os.rename(self.path, aside)
            logger.error("spool %s: kept as %s", self.path.name, aside.name)
        else:
            os.unlink(self.path)
        os.close(self.fd)

    def release(self) -> None:
        """Keep the file for the next process, and let it claim the file."""
        os.close(self.fd)


class Spool:
    """This process's spool files, oldest first: claimed ones, then the one it appends to."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._token = f"{os.getpid()}-{int(time.time() * 1000)}"
        self._files: deque[SpoolFile] = deque()
        self._appending: SpoolFile | None = None
        self._reading: tuple[list[Row], int] | None = None

    @property
    def pending(self) -> int:
        """Rows in spool files that are not in the database yet."""
        return sum(spool.pending for spool in self._files)

    @property
    def oldest_at(self) -> float | None:
        return min(
            (spool.oldest_at for spool in self._files if spool.oldest_at is not None),
            default=None,
        )

    def _name(self, prefix: str) -> Path:
        # The serial is per process, so two writers (event loops) of one process never collide.
        return self.directory / f"{prefix}-{self._token}-{next(_serials)}.bin"

    def claim_orphans(self) -> int:
        """Claim the spool files of dead processes; return how many rows they hold."""
        self.directory.mkdir(parents=True, exist_ok=True)
        own = {spool.path for spool in self._files}
        claimed = 0
        for path in sorted(self.directory.glob("*.bin"), key=_mtime):
            if path in own:
                continue
            spool = SpoolFile.claim(path, self._name("claimed"))
            if spool is None:
                continue
            if spool.drained:
                spool.remove()
                continue
            logger.warning("run writer: draining %d rows left in %s", spool.pending, path.name)
            # Order only matters within one process's rows (a run never spans two processes),
            # so a claimed file simply joins the end.
            self._files.append(spool)
            claimed += spool.pending
        return claimed

    def append(self, batches: Sequence[list[Row]], queued_at: float) -> None:
        """Append batches (the oldest rows not yet spooled), durably."""
        if self._appending is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._appending = SpoolFile.create(self._name("spool"))
            self._files.append(self._appending)
        self._appending.append(batches, queued_at)

    def append_apart(self, batches: Sequence[list[Row]], queued_at: float) -> None:
        """Append batches to a file of their own, drained after every file held now, durably.

        For rows that must follow the files just claimed: a dead writer's unstored log rows
        come after what it spooled (`telemetry.store.chunklog`).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        spool = SpoolFile.create(self._name("spool"))
        try:
            spool.append(batches, queued_at)
        except BaseException:
            spool.remove()
            raise
        self._files.append(spool)

    def head(self) -> list[Row] | None:
        """The oldest batch not yet in the database (the same one until `advance`)."""
        while self._files:
            if self._reading is None:
                self._reading = self._files[0].read()
            if self._reading is not None:
                return self._reading[0]
            self._finish(self._files[0])
        return None

    def advance(self) -> None:
        """Note that the head batch is in the database; delete files that are done."""
        assert self._reading is not None
        rows, next_offset = self._reading
        self._reading = None
        spool = self._files[0]
        spool.advance(next_offset, len(rows))
        if spool.drained:
            self._finish(spool)

    def _finish(self, spool: SpoolFile) -> None:
        self._files.popleft()
        spool.remove()
        if spool is self._appending:
            self._appending = None

    def close(self) -> None:
        """Release every file; what is still in one is drained by the next writer to start."""
        while self._files:
            spool = self._files.popleft()
            if spool.drained:
                spool.remove()
            else:
                logger.warning(
                    "run writer: %d rows stay in %s for the next start", spool.pending, spool.path
                )
                spool.release()
        self._appending = None
        self._reading = None


def _dumps(batch: list[Row]) -> tuple[bytes, int]:
    """Pickle a batch; a row that cannot be pickled is logged and left out, not retried forever."""
    try:
        return pickle.dumps(batch, protocol=5), len(batch)
    except (pickle.PicklingError, TypeError, AttributeError):
        kept = []
        for row in batch:
            try:
                pickle.dumps(row, protocol=5)
            except (pickle.PicklingError, TypeError, AttributeError):
                logger.exception("spool: dropped a row that cannot be pickled: %.200r", row)
            else:
                kept.append(row)
        return pickle.dumps(kept, protocol=5), len(kept)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
