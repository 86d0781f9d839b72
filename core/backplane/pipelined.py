"""The Redis backplane's mouth: one connection per event loop for the commands a request sends
and never waits on — telemetry events (`telemetry/events.py`) and the answers to stop requests
(`gateway/coordination/stop.py`).

redis-py costs a coroutine, a connection checkout and Python-side packing per command (or per
pipeline): about a tenth of the gateway's CPU per request went there. Here a command is packed
once (with hiredis, or pre-packed by the caller), queued, and everything queued goes out in one
write at the end of the event loop's pass; replies are parsed by hiredis as they arrive and
matched to their commands in order (Redis answers in order on one connection). Errors are
logged, or handed to the command's callback.

`write_now()` hands the queue to the kernel before it returns, for callers another process
waits on (a worker's answer to a stop request).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from collections.abc import Callable
from typing import Any, cast

import hiredis
from redis.asyncio.connection import SSLConnection, parse_url

logger = logging.getLogger(__name__)

OnReply = Callable[[Any], None] | None
RECONNECT_SECONDS = 0.5
BARRIER_SECONDS = 5.0
# Past this much unsent (Redis is gone or stalled), new commands are dropped, not buffered.
MAX_UNSENT_BYTES = 32 * 1024 * 1024


# hiredis's stub types the command as a one-element tuple; it takes any number of arguments.
_pack_command = cast(Callable[[tuple[bytes | str | int | float, ...]], bytes], hiredis.pack_command)


def pack(*args: bytes | str | int | float) -> bytes:
    """One command in RESP, ready for `send_packed`."""
    return _pack_command(args)


class PipelinedConnection(asyncio.Protocol):
    """Commands written in order, replies read in the background; nothing awaits a reply
    unless it asks to (`barrier()`)."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._address = parse_url(url)
        self._transport: asyncio.Transport | None = None
        self._reader = hiredis.Reader()
        self._queued: list[bytes] = []  # packed, not yet written
        self._queued_replies: list[OnReply] = []
        self._queued_bytes = 0
        self._written: collections.deque[OnReply] = collections.deque()  # awaiting a reply
        self._flush_scheduled = False
        self._connecting: asyncio.Task[None] | None = None
        self._dropped = 0
        self._failed_connects = 0  # in a row: Redis is out of reach while it is not 0

    # --- sending

    def send_packed(self, packed: bytes, on_reply: OnReply = None) -> None:
        """Queue one packed command; it goes out at the end of this pass of the loop."""
        if self._queued_bytes > MAX_UNSENT_BYTES or (
            self._transport is not None
            and self._transport.get_write_buffer_size() > MAX_UNSENT_BYTES
        ):
            self._drop(on_reply)
            return
        self._queued.append(packed)
        self._queued_replies.append(on_reply)
        self._queued_bytes += len(packed)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def send(self, *args: bytes | str | int | float, on_reply: OnReply = None) -> None:
        self.send_packed(_pack_command(args), on_reply)

    def write_now(self) -> bool:
        """Write what is queued now; True if all of it is in the kernel's hands."""
        self._flush()
        transport = self._transport
        return (
            transport is not None
            and not self._queued
            and not transport.is_closing()
            and transport.get_write_buffer_size() == 0
        )

    async def barrier(self) -> None:
        """Return once Redis has answered everything sent before; raise if it cannot."""
        await self.call(pack(b"PING"))

    async def call(self, packed: bytes) -> Any:
        """Send one packed command and return its reply; raise if it fails — at once while
        Redis is known to be out of reach, rather than wait for it — or takes longer than
        BARRIER_SECONDS.

        The command goes out with the rest of this pass's, in one write: a write on a
        loopback socket costs the writer the receiving side's work too (the kernel delivers
        it there and then), and each request's rate-limit check writing its own was a seventh
        of the event loop's time under 32 connections (docs/performance.md)."""
        if self._failed_connects and self._transport is None:
            self._connect_soon()
            raise ConnectionError("Redis is unreachable")
        done: asyncio.Future[Any] = self._loop.create_future()

        def answered(reply: Any) -> None:
            if not done.done():
                if isinstance(reply, Exception):
                    done.set_exception(reply)
                else:
                    done.set_result(reply)

        self.send_packed(packed, answered)
        # A timer on the future itself: asyncio.wait_for wraps it in two more.
        late = self._loop.call_later(BARRIER_SECONDS, answered, TimeoutError("Redis is late"))
        try:
            return await done
        finally:
            late.cancel()

    def _drop(self, on_reply: OnReply) -> None:
        self._dropped += 1
        if self._dropped == 1 or self._dropped % 10_000 == 0:
            logger.error("redis: unreachable or stalled; dropped %d commands", self._dropped)
        if on_reply is not None:
            on_reply(ConnectionError("Redis is unreachable"))

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._queued:
            return
        transport = self._transport
        if transport is None or transport.is_closing():
            self._connect_soon()
            return
        self._written.extend(self._queued_replies)
        data = b"".join(self._queued) if len(self._queued) > 1 else self._queued[0]
        self._queued = []
        self._queued_replies = []
        self._queued_bytes = 0
        transport.write(data)

    # --- connecting

    def _connect_soon(self) -> None:
        if self._connecting is None or self._connecting.done():
            self._connecting = self._loop.create_task(self._connect())

    async def _connect(self) -> None:
        address = self._address
        while True:
            try:
                if "path" in address:
                    await self._loop.create_unix_connection(lambda: self, address["path"])
                else:
                    secure = address.get("connection_class") is SSLConnection
                    await self._loop.create_connection(
                        lambda: self,
                        address.get("host", "localhost"),
                        address.get("port", 6379),
                        ssl=ssl.create_default_context() if secure else None,
                    )
                return
            except OSError as error:
                self._failed_connects += 1
                if self._failed_connects % 120 == 1:  # the first time, then once a minute
                    logger.warning("redis: cannot connect (%s); retrying", error)
                self._fail_awaited(ConnectionError(f"Redis is unreachable: {error}"))
                await asyncio.sleep(RECONNECT_SECONDS)

    def _fail_awaited(self, error: ConnectionError) -> None:
        """Answer the queued commands someone waits on with `error`; keep the others queued for
        when Redis is back (a cut of a few seconds loses no telemetry event)."""
        if all(on_reply is None for on_reply in self._queued_replies):
            return
        kept = [
            (p, r) for p, r in zip(self._queued, self._queued_replies, strict=True) if r is None
        ]
        failed = [r for r in self._queued_replies if r is not None]
        self._queued = [packed for packed, _ in kept]
        self._queued_replies = [None] * len(kept)
        self._queued_bytes = sum(len(packed) for packed in self._queued)
        for on_reply in failed:
            on_reply(error)

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self._reader = hiredis.Reader()
        self._dropped = 0
        self._failed_connects = 0
        # The handshake goes first, then whatever was queued while there was no connection.
        handshake: list[bytes] = []
        if self._address.get("password"):
            credentials = [self._address.get("username"), self._address["password"]]
            handshake.append(pack(b"AUTH", *[c for c in credentials if c]))
        if self._address.get("db"):
            handshake.append(pack(b"SELECT", self._address["db"]))
        self._queued[:0] = handshake
        self._queued_replies[:0] = [self._handshake_failed] * len(handshake)
        self._flush()

    def _handshake_failed(self, reply: Any) -> None:
        if isinstance(reply, Exception) and self._transport is not None:
            logger.error("redis: handshake refused: %s", reply)
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        reader, written = self._reader, self._written
        reader.feed(data)
        while (reply := reader.gets()) is not False:
            on_reply = written.popleft()
            if on_reply is not None:
                try:
                    on_reply(reply)
                except Exception:
                    logger.exception("redis: reply handler failed")
            elif isinstance(reply, hiredis.ReplyError):
                logger.warning("redis: command failed: %s", reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        # What was written and not answered may or may not have been done: tell whoever asked.
        lost, self._written = self._written, collections.deque()
        error = ConnectionError(f"Redis connection lost: {exc}")
        for on_reply in lost:
            if on_reply is not None:
                on_reply(error)
        if lost:
            logger.warning("redis: connection lost with %d commands unanswered", len(lost))
        if self._queued:
            self._connect_soon()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
