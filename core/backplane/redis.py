"""The production backplane: Redis, shared by every worker process.

Four connections per event loop, each for what it does best:

- the pipelined connection (`pipelined.py`) for what nothing waits on — stream appends, reply
  pushes, the dashboard group's size: packed by hiredis, written once per pass of the loop;
- the broadcast listener (`broadcast.py`), one pub/sub connection on every broadcast channel;
- the stream reader, one connection for the worker's one blocking read of its telemetry
  subscribers' streams (`read_streams`, `telemetry/feed.py`);
- a redis-py client for what is awaited: publishing, claims, blocking pops, stream reads.

Redis out of reach is an error of Mortar's vocabulary, `BackendUnavailable` (503
`backend_unavailable`), from every awaited call: the caller decides what it can do without.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import hiredis
import redis
import redis.asyncio as redis_async
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry as BlockingRetry

from core.backplane.base import NO_ENTRY, Backplane, Entries, Stream
from core.backplane.broadcast import BroadcastListener
from core.backplane.pipelined import PipelinedConnection, pack
from core.errors import BackendUnavailable
from core.ids import new_hex_id
from core.ratelimits import Bucket, BucketState, Verdict

logger = logging.getLogger(__name__)

PING_SECONDS = 2.0
CONNECT_SECONDS = 2.0  # a Redis that does not even refuse (a lost host) is given up on
READ_MARGIN_SECONDS = 5.0  # past its BLOCK, a read whose answer has not come is given up on
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, ConnectionError, TimeoutError)
# GCRA over a request's buckets, atomic in Redis (`ratelimit.lua`); sent by its SHA1, and once
# in full when Redis does not know it yet (after a restart or SCRIPT FLUSH).
RATE_LIMIT_SCRIPT = (Path(__file__).parent / "ratelimit.lua").read_bytes()
RATE_LIMIT_SHA = hashlib.sha1(RATE_LIMIT_SCRIPT).hexdigest().encode()
DELETE_IF_EQUAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


redis_reply_error = hiredis.ReplyError


def _bytes(value: bytes | str) -> bytes:
    # The client does not decode responses: what Redis answers is bytes.
    return value if isinstance(value, bytes) else value.encode()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def broadcast_prefix(prefix: str) -> str:
    return f"{prefix}:broadcast:"


@contextlib.contextmanager
def unavailable_on_error() -> Iterator[None]:
    """Turn Redis out of reach into `BackendUnavailable`."""
    try:
        yield
    except UNREACHABLE as error:
        raise BackendUnavailable(
            "The service's shared state (Redis) cannot be reached right now; try again shortly."
        ) from error


def _without_retries(url: str) -> redis_async.Redis:
    # A client whose errors reach its caller at once, for a caller that reconnects itself
    # (and must know when it had to). No socket timeout: its reads block on purpose (pub/sub,
    # XREAD BLOCK), and redis-py's default (5 s) would end them; `read_streams` bounds its own.
    return redis_async.from_url(
        url,
        retry=Retry(NoBackoff(), 0),
        socket_connect_timeout=CONNECT_SECONDS,
        socket_timeout=None,
    )


class RedisStream(Stream):
    """A Redis Stream; appends are XADDs on the pipelined connection, never awaited."""

    def __init__(
        self, key: str, maxlen: int, pipelined: PipelinedConnection, client: redis_async.Redis
    ) -> None:
        self._key = key
        self._client = client
        self._send_packed = pipelined.send_packed
        # `XADD {key} MAXLEN ~ {maxlen} * data {payload}`, packed once less the payload (the
        # ninth argument, appended per entry).
        head = pack(b"XADD", key, b"MAXLEN", b"~", maxlen, b"*", b"data", b"")
        self._head = head.removesuffix(b"$0\r\n\r\n")

    def append(self, payload: bytes) -> None:
        self._send_packed(b"%b$%d\r\n%b\r\n" % (self._head, len(payload), payload))

    async def read(self, after: str, block: float, count: int = 500) -> list[tuple[str, bytes]]:
        # XREAD's BLOCK 0 waits forever; no block at all is what 0 means here.
        wait_ms = int(block * 1000) or None
        with unavailable_on_error():
            reply = await self._client.xread({self._key: after}, block=wait_ms, count=count)
        assert isinstance(reply, list | type(None))  # RESP2: [[key, [(id, fields), …]], …]
        return [
            (_text(entry_id), _bytes(fields[b"data"]))
            for _, entries in reply or ()
            for entry_id, fields in entries
        ]

    async def last_id(self) -> str:
        with unavailable_on_error():
            entries = await self._client.xrevrange(self._key, count=1)
        return _text(entries[0][0]) if entries and entries[0][0] else NO_ENTRY


class RedisBackplane(Backplane):
    """This event loop's connections to the Redis every worker shares."""

    name = "redis"
    shared = True

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__()
        self._url = url
        self._prefix = prefix
        self._client = redis_async.from_url(url, socket_connect_timeout=CONNECT_SECONDS)
        self._pipelined = PipelinedConnection(url)
        self._listener_client = _without_retries(url)
        self._listener = BroadcastListener(
            self._listener_client, broadcast_prefix(prefix), self._deliver, self._subscribed
        )
        self._reader_client = _without_retries(url)
        self._streams: dict[str, RedisStream] = {}
        self._rate_keys: dict[str, str] = {}  # a bucket's name → its key
        self._group_sizes: dict[str, bytes | None] = {}  # a packed ZCARD per group, or None

    def _key(self, name: str) -> str:
        return f"{self._prefix}:{name}"

    # --- broadcast

    def listen(self) -> None:
        self._listener.listen()

    def listening(self) -> bool:
        return self._listener.listening()

    async def start(self) -> None:
        with unavailable_on_error():
            if await self._listener.start():
                await self._pipelined.barrier()  # connected too, so the first write is as quick

    async def close(self) -> None:
        await self._listener.close()
        self._pipelined.write_now()
        self._pipelined.close()
        await self._client.aclose()
        await self._listener_client.aclose()
        await self._reader_client.aclose()

    async def publish(self, channel: str, message: str) -> int:
        with unavailable_on_error():
            listeners: int = await self._client.publish(
                broadcast_prefix(self._prefix) + channel, message
            )
        return listeners

    # --- reply lists

    def new_reply_list(self) -> str:
        return self._key(f"replies:{new_hex_id()}")

    def push_reply(self, address: str, reply: bytes, ttl: int) -> None:
        self._pipelined.send_packed(pack(b"RPUSH", address, reply))
        self._pipelined.send_packed(pack(b"EXPIRE", address, ttl))
        self._pipelined.write_now()

    async def pop_reply(self, address: str, wait: float) -> bytes | None:
        with unavailable_on_error():
            reply = await self._client.blpop([address], timeout=wait)
        return _bytes(reply[1]) if reply is not None else None

    async def drop_reply_list(self, address: str) -> None:
        with unavailable_on_error():
            await self._client.delete(address)

    # --- keys

    async def set_if_absent(self, key: str, value: bytes, ttl: int) -> bool:
        with unavailable_on_error():
            return bool(await self._client.set(self._key(key), value, nx=True, ex=ttl))

    async def set(self, key: str, value: bytes, ttl: int) -> None:
        with unavailable_on_error():
            await self._client.set(self._key(key), value, ex=ttl)

    async def get(self, key: str) -> bytes | None:
        with unavailable_on_error():
            value = await self._client.get(self._key(key))
        return None if value is None else _bytes(value)

    async def delete_if_equal(self, key: str, value: bytes) -> bool:
        with unavailable_on_error():
            return bool(await self._client.eval(DELETE_IF_EQUAL, 1, self._key(key), value))

    # --- rate limits: on the pipelined connection, one packed EVALSHA per request (redis-py
    # would cost more CPU than the script itself)

    def _rate_args(self, mode: bytes, buckets: Sequence[Bucket]) -> list[bytes | str | int]:
        keys = self._rate_keys
        args: list[bytes | str | int] = [len(buckets)]
        for bucket in buckets:
            key = keys.get(bucket.name)
            if key is None:
                key = keys[bucket.name] = self._key(f"ratelimit:{bucket.name}")
            args.append(key)
        args.append(mode)
        for bucket in buckets:
            args += (bucket.limit, bucket.cost)
        return args

    async def rate_admit(self, buckets: Sequence[Bucket]) -> Verdict | None:
        args = self._rate_args(b"admit", buckets)
        try:
            try:
                reply = await self._pipelined.call(pack(b"EVALSHA", RATE_LIMIT_SHA, *args))
            except redis_reply_error as error:
                if not str(error).startswith("NOSCRIPT"):
                    raise
                reply = await self._pipelined.call(pack(b"EVAL", RATE_LIMIT_SCRIPT, *args))
        except (ConnectionError, TimeoutError, redis_reply_error) as error:
            logger.warning("redis: the rate limiter did not answer (%s); admitting", error)
            return None
        # {admitted, retry_after_ms, then per bucket: remaining, reset_ms}
        states = tuple(
            BucketState(bucket.limit, reply[2 * n], reply[2 * n + 1])
            for n, bucket in enumerate(buckets, 1)
        )
        return Verdict(reply[0] == 1, reply[1], states)

    def rate_count(self, buckets: Sequence[Bucket]) -> None:
        args = self._rate_args(b"count", buckets)

        def counted(reply: Any) -> None:
            if isinstance(reply, redis_reply_error) and str(reply).startswith("NOSCRIPT"):
                self._pipelined.send_packed(pack(b"EVAL", RATE_LIMIT_SCRIPT, *args))
            elif isinstance(reply, Exception):
                logger.warning("redis: usage not counted against rate limits: %s", reply)

        self._pipelined.send_packed(pack(b"EVALSHA", RATE_LIMIT_SHA, *args), counted)

    # --- streams and writes nobody waits for

    def stream(self, name: str, maxlen: int) -> RedisStream:
        stream = self._streams.get(name)
        if stream is None:
            stream = RedisStream(self._key(name), maxlen, self._pipelined, self._client)
            self._streams[name] = stream
        return stream

    async def read_streams(
        self, after: Mapping[str, str], block: float, count: int = 500
    ) -> dict[str, Entries]:
        # On a connection of its own: the read blocks it, and a cancelled read drops it
        # (redis-py disconnects a connection whose reply was not read).
        keys = {self._key(name): name for name in after}
        wait_ms = int(block * 1000) or None
        with unavailable_on_error():
            reply = await asyncio.wait_for(
                self._reader_client.xread(
                    {self._key(name): entry_id for name, entry_id in after.items()},
                    block=wait_ms,
                    count=count,
                ),
                block + READ_MARGIN_SECONDS,  # a connection that went silent
            )
        assert isinstance(reply, list | type(None))  # RESP2: [[key, [(id, fields), …]], …]
        return {
            keys[_text(key)]: [
                (_text(entry_id), _bytes(fields[b"data"])) for entry_id, fields in entries
            ]
            for key, entries in reply or ()
            if entries
        }

    def send_now(self) -> None:
        self._pipelined.write_now()

    async def barrier(self) -> None:
        with unavailable_on_error():
            await self._pipelined.barrier()

    def if_group_has_members(self, layer: Any, group: str, then: Callable[[], None]) -> None:
        if group not in self._group_sizes:
            on_our_redis = _is_on_redis(layer, self._url)
            self._group_sizes[group] = (
                pack(b"ZCARD", layer._group_key(group)) if on_our_redis else None
            )
        group_size = self._group_sizes[group]
        if group_size is None:
            then()  # a layer elsewhere: its groups are not ours to count
            return

        def counted(reply: Any) -> None:
            if isinstance(reply, int) and reply > 0:
                then()

        self._pipelined.send_packed(group_size, counted)

    async def ping(self) -> None:
        await asyncio.wait_for(self._client.ping(), PING_SECONDS)


def publish_from_sync(url: str, prefix: str, channel: str, message: str) -> None:
    """Publish from synchronous code (signals, management commands), on a connection of its
    own; raise `BackendUnavailable` at once when Redis is out of reach."""
    # One try, bounded: the caller has already committed its change and only logs a failure,
    # so a Redis that does not answer must not hold a command or a page for redis-py's retries.
    client = redis.Redis.from_url(
        url,
        retry=BlockingRetry(NoBackoff(), 0),
        socket_connect_timeout=CONNECT_SECONDS,
        socket_timeout=CONNECT_SECONDS,
    )
    try:
        with unavailable_on_error():
            client.publish(broadcast_prefix(prefix) + channel, message)
    finally:
        client.close()


def _is_on_redis(layer: Any, url: str) -> bool:
    """Whether the channel layer is channels-redis on this Redis alone (its groups are then
    sorted sets the pipelined connection can count)."""
    try:
        from channels_redis.core import RedisChannelLayer
    except ImportError:
        return False
    return (
        isinstance(layer, RedisChannelLayer)
        and len(layer.hosts) == 1
        and layer.hosts[0].get("address") == url
        and hasattr(layer, "_group_key")
    )
