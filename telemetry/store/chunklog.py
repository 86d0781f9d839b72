"""The run writer's crash log: every row queued for the writer, on local disk, until it is stored.

The writer keeps rows in memory for a few milliseconds before a batch reaches Postgres (or, in an
outage, its fsync'ed spool). A process killed meanwhile (kill -9, the OOM killer, a crash) would
lose them, chunks its clients already received among them. So each writer also appends every row it
queues to a log of its own, as it queues it: the log's segment is a file mapped into memory
(``mmap``), so a row is logged by copying it there — into the OS's page cache, with no system call —
and is in the log before the caller goes on (before its bytes reach a client). It is never fsync'ed:
a process crash leaves what was copied in the page cache, which reaches the disk without the
process; power loss before that is not covered. (A ``write()`` a loop pass cost a system call per
lone chunk, and each one let the run writer's thread take the GIL from the event loop;
``bench/chunklog_bench.py`` measures the copy.) The writer acknowledges (``ack``) how many rows
reached Postgres or the spool; the log is cut into segments, and a segment whose rows are all
acknowledged is deleted, so the log stays small.

A segment is ``<dir>/log-<owner>-<n>.seg``, made as ``.new`` and renamed once its owner holds
an exclusive ``flock`` on it; the kernel drops the lock when the process dies. A writer starting
up (and every minute after) takes the directory's ``claim.lock``, locks the segments of dead
owners (those it can lock), and hands their unacknowledged rows to its spool, which writes them
idempotently, through the database outage if there is one; only then does it delete the
segments, still under ``claim.lock``, so two writers never replay the same segment.

Segment format (version 1), little-endian::

    segment := MAGIC u64(seq of its first row) record*
    MAGIC   := b"MRTLOG\\x00\\x01"
    record  := u32 body length, u32 CRC-32 of the body, body
    body    := b"c" u16 len(run id) u32 seq i64 offset_us run-id data   a chunk (``ChunkSent``)
             | b"r" pickle                                             another row (spool form)
             | b"n"                                                    a row that could not be
                                                                       pickled (counted, empty)
             | b"a" u64 count                                          rows 0..count-1 are stored

Rows are numbered from 0 in the order the owner queued them; a segment's rows are consecutive
from its header's number. A segment's blocks are reserved when it is made (``posix_fallocate``:
a store into a mapping can never meet a full disk), so its unused end reads as zeros. A reader
stops at the first record that is short or fails its CRC: the end of the records, or the torn end
of a copy cut short. Pickle is as safe as in the spool: only this machine's
Mortar processes write under VAR_DIR.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import mmap
import os
import pickle
import struct
import time
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MAGIC = b"MRTLOG\x00\x01"
SEGMENT_HEADER = struct.Struct("<8sQ")
FRAME = struct.Struct("<II")
CHUNK_HEAD = struct.Struct("<cHIq")
ACK = struct.Struct("<cQ")
# A segment is closed, and a new one begun, once it holds this many bytes; the closed one is
# deleted as soon as all its rows are acknowledged. Small enough that the log stays a few MB
# while the database keeps up, large enough that segments are made rarely.
SEGMENT_BYTES = 4 * 1024 * 1024
# How long rows go unlogged after the disk refused a new segment, before the next try.
RETRY_SECONDS = 1.0

Row = tuple[Any, ...]  # a row in the spool's form (`telemetry.store.items.encode_row`)
Chunk = tuple[str, int, int, bytes]  # run id, seq, offset µs, data: a `ChunkSent`

_serials = itertools.count(1)
_crc32 = zlib.crc32
_pack_frame = FRAME.pack
_pack_chunk_head = CHUNK_HEAD.pack


@dataclass
class Segment:
    """A segment this log appends to, or appended to and waits for its acknowledgment."""

    path: Path
    fd: int
    # The segment's whole length (its blocks reserved), mapped; unmapped once it is closed.
    mapping: mmap.mmap
    size: int  # bytes used
    capacity: int
    end_seq: int = -1  # once closed: the number of the first row after it


class ChunkLog:
    """One writer's log: append rows as they are queued, acknowledge what is stored."""

    def __init__(self, directory: Path, *, segment_bytes: int = SEGMENT_BYTES):
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._owner = f"{os.getpid()}-{int(time.time() * 1000)}-{next(_serials)}"
        self._serial = itertools.count(1)
        self._appended = 0  # rows appended; the next one's number
        self._acked = 0
        self._segment: Segment | None = None
        self._full: deque[Segment] = deque()  # closed segments, oldest first
        self._closed = False
        self._failing_until = 0.0  # the disk refused a new segment: rows go unlogged till then

    @property
    def unacknowledged(self) -> int:
        return self._appended - self._acked

    # The request path: a copy into the page cache a row, no system call.

    def append_chunk(self, chunk: Chunk) -> None:
        """Log a chunk row (the hot path: one per chunk a client is sent)."""
        if self._closed:
            return
        run_id, seq, offset_us, data = chunk
        rid = run_id.encode()
        body = _pack_chunk_head(b"c", len(rid), seq, offset_us) + rid + data
        self._put(body)
        self._appended += 1

    def append_row(self, row: Row) -> None:
        """Log any other row (a run opened or closed), in the spool's form."""
        if self._closed:
            return
        try:
            body = b"r" + pickle.dumps(row, protocol=5)
        except (pickle.PicklingError, TypeError, AttributeError):
            # Counted all the same, so the rows after it keep their numbers; the spool drops it
            # the same way if it ever gets there.
            logger.exception("chunk log: a row that cannot be pickled is not logged: %.200r", row)
            body = b"n"
        self._put(body)
        self._appended += 1

    def ack(self, count: int) -> None:
        """Note that the first `count` rows are stored (in Postgres or the spool)."""
        if count <= self._acked or self._closed:
            return
        self._acked = count
        self._put(ACK.pack(b"a", count))
        while self._full and self._full[0].end_seq <= count:
            self._remove(self._full.popleft())

    def _put(self, body: bytes) -> None:
        """Copy a body, framed as a record, into the current segment's mapping: it is in the
        page cache, and so survives the process, once this returns."""
        record = _pack_frame(len(body), _crc32(body)) + body
        segment = self._segment
        if segment is None or segment.size + len(record) > segment.capacity:
            segment = self._next_segment(len(record))
            if segment is None:
                return
        end = segment.size + len(record)
        segment.mapping[segment.size : end] = record
        segment.size = end

    def _next_segment(self, record_bytes: int) -> Segment | None:
        """Close the segment appended to, and begin the next, made for at least a record of
        `record_bytes`; None (the record goes unlogged) while the disk refuses."""
        self._close_segment(self._appended)
        if self._failing_until:
            if time.monotonic() < self._failing_until:
                return None
            logger.warning("chunk log: trying %s again", self.directory)
        try:
            # The next row's number: whatever was not logged before it, it is numbered right
            # (a gap is log lost, never rows misnumbered).
            self._segment = self._new_segment(
                first_seq=self._appended,
                length=max(self.segment_bytes, SEGMENT_HEADER.size + record_bytes),
            )
        except OSError:
            if not self._failing_until:
                logger.exception("chunk log: cannot write to %s; rows go unlogged", self.directory)
            self._failing_until = time.monotonic() + RETRY_SECONDS
            return None
        self._failing_until = 0.0
        return self._segment

    def _close_segment(self, end_seq: int) -> None:
        segment, self._segment = self._segment, None
        if segment is None:
            return
        segment.end_seq = end_seq
        # Unmapped, its pages stay in the page cache as the file's; only its lock is kept.
        segment.mapping.close()
        if end_seq <= self._acked:
            self._remove(segment)
        else:
            self._full.append(segment)

    def _new_segment(self, *, first_seq: int, length: int) -> Segment:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"log-{self._owner}-{next(self._serial):06d}.seg"
        # Made under a name claimers ignore, and renamed once locked: a claimer must never lock
        # a live owner's segment before its owner does.
        making = path.with_suffix(".new")
        fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        mapping: mmap.mmap | None = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Its blocks reserved up front: a store into the mapping can never meet a full
            # disk (which would be a SIGBUS, not an error).
            os.posix_fallocate(fd, 0, length)
            mapping = mmap.mmap(fd, length)
            header = SEGMENT_HEADER.pack(MAGIC, first_seq)
            mapping[: len(header)] = header
            os.rename(making, path)
        except BaseException:
            if mapping is not None:
                mapping.close()
            os.close(fd)
            making.unlink(missing_ok=True)
            raise
        return Segment(path, fd, mapping, len(header), length)

    def _remove(self, segment: Segment) -> None:
        segment.mapping.close()  # (a no-op if it is closed already)
        # Unlinked before its lock is dropped, so nobody claims a segment that is done.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(segment.path)
        os.close(segment.fd)

    def close(self) -> None:
        """Delete the segments if everything is stored, else leave them (unlocked) for the next
        writer to replay."""
        self._closed = True
        self._close_segment(self._appended)
        segments = list(self._full)
        self._full.clear()
        done = self._acked >= self._appended
        if not done:
            logger.warning(
                "chunk log: %d rows not stored; the next writer to start replays them",
                self._appended - self._acked,
            )
        for segment in segments:
            if done:
                self._remove(segment)
            else:
                os.close(segment.fd)


# Replay: on the writer's thread, under the directory's claim lock.


@contextlib.contextmanager
def claim_lock(directory: Path) -> Iterator[None]:
    """Hold the directory's claim lock: one claimer at a time, across processes."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / "claim.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock


@dataclass
class Orphans:
    """The segments of dead writers, locked by this process, and their unacknowledged rows."""

    rows: list[Row] = field(default_factory=list)
    segments: list[tuple[Path, int]] = field(default_factory=list)

    def remove(self) -> None:
        """Delete the segments (their rows are in the spool now) and drop their locks."""
        for path, fd in self.segments:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.close(fd)
        self.segments.clear()

    def release(self) -> None:
        """Leave the segments for a later claim."""
        for _, fd in self.segments:
            os.close(fd)
        self.segments.clear()


@dataclass
class SegmentContents:
    first_seq: int
    rows: list[tuple[int, Row]]  # (its number, the row)
    acked: int
    torn: int  # bytes at the end that are no whole record (the unused zeros not counted)


def read_segment(data: bytes) -> SegmentContents | None:
    """The rows and acknowledgments of a segment's bytes; None if it is not a segment."""
    if len(data) < SEGMENT_HEADER.size:
        return None
    magic, first_seq = SEGMENT_HEADER.unpack_from(data)
    if magic != MAGIC:
        return None
    rows: list[tuple[int, Row]] = []
    acked = 0
    seq = first_seq
    offset = SEGMENT_HEADER.size
    end = len(data)
    while offset + FRAME.size <= end:
        length, crc = FRAME.unpack_from(data, offset)
        start = offset + FRAME.size
        body = data[start : start + length]
        if len(body) < length or _crc32(body) != crc or not body:
            break
        kind = body[:1]
        if kind == b"c":
            _, id_length, chunk_seq, offset_us = CHUNK_HEAD.unpack_from(body)
            id_end = CHUNK_HEAD.size + id_length
            run_id = body[CHUNK_HEAD.size : id_end].decode()
            rows.append((seq, ("c", run_id, chunk_seq, offset_us, body[id_end:])))
            seq += 1
        elif kind == b"r":
            rows.append((seq, pickle.loads(body[1:])))
            seq += 1
        elif kind == b"n":
            seq += 1
        elif kind == b"a":
            acked = max(acked, ACK.unpack(body)[1])
        else:
            break  # not a record this version writes: treat as the end
        offset = start + length
    # A segment's blocks are reserved whole, so what follows its last record is zeros: the
    # room it did not use. Anything else there is a record cut short.
    torn = 0 if data.count(0, offset) == end - offset else end - offset
    return SegmentContents(first_seq, rows, acked, torn)


def claim_orphans(directory: Path) -> Orphans:
    """Lock the segments of dead writers and collect their unacknowledged rows, in order.

    Call under `claim_lock`; then put the rows somewhere durable and `remove()` the segments
    (or `release()` them if that failed).
    """
    orphans = Orphans()
    if not directory.exists():
        return orphans
    by_owner: dict[str, list[SegmentContents]] = {}
    for path in sorted(directory.glob("log-*.seg")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its writer is alive
            os.close(fd)
            continue
        orphans.segments.append((path, fd))
        try:
            contents = read_segment(_read_all(fd))
        except Exception:  # a damaged record that passed its CRC: keep what came before
            logger.exception("chunk log: %s cannot be read; it is not replayed", path.name)
            contents = None
        if contents is None:
            logger.error("chunk log: %s is not a log segment; it is not replayed", path.name)
            continue
        if contents.torn:
            logger.warning("chunk log: %s ends in a torn record (%d B)", path.name, contents.torn)
        owner = path.name.removeprefix("log-").rsplit("-", 1)[0]
        by_owner.setdefault(owner, []).append(contents)
    for owner, segments in by_owner.items():
        # An acknowledgment may sit in a later segment than the rows it covers.
        acked = max(segment.acked for segment in segments)
        rows = sorted(
            (numbered for segment in segments for numbered in segment.rows if numbered[0] >= acked),
            key=lambda numbered: numbered[0],
        )
        if rows:
            logger.warning(
                "chunk log: replaying %d rows a dead writer (%s) had not stored", len(rows), owner
            )
        orphans.rows.extend(row for _, row in rows)
    return orphans


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    parts = []
    offset = 0
    while offset < size:
        part = os.pread(fd, size - offset, offset)
        if not part:
            break
        parts.append(part)
        offset += len(part)
    return b"".join(parts)
