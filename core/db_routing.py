"""Reads off the primary: which database a read goes to when a streaming replica is configured.

With `DATABASE_REPLICA_URL` set, Django has a second database, `replica`. Nothing reads from it
unless it asked to: the dashboard's read-only pages run inside `replica_reads()` (the router
then sends their reads there), and replay picks a database per run with `replica_alias()`.
Everything else — writes, the request path (keys, budgets, holds), the run writer, sign-in
state, and any read inside a transaction on the primary — stays on the primary.

The replica is used only while it is near enough: a probe, run at most once a `PROBE_SECONDS`
per process, measures its replay lag and whether it answers. Beyond
`MORTAR_REPLICA_MAX_LAG_SECONDS`, or when it cannot be reached (then for `RETRY_SECONDS`
before it is tried again), reads go to the primary. Each change of state is logged once.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from inspect import iscoroutinefunction
from typing import Any, TypeVar, cast

from django.conf import settings
from django.db import connections
from django.db.models import Model
from django.http import Http404

from core.db import DatabaseAway

logger = logging.getLogger(__name__)

PRIMARY = "default"
REPLICA = "replica"
# How long a probe's answer stands: lag is re-measured at most this often per process.
PROBE_SECONDS = 1.0
# How long an unreachable replica is left alone before it is tried again.
RETRY_SECONDS = 5.0
# Sign-in state is read where it was just written: never from the replica.
PRIMARY_ONLY_APPS = frozenset({"auth", "sessions", "axes", "admin"})

# Replay stalled with WAL received but not applied: lag is the time since the last transaction
# replayed. When all that was received is applied the replica is as fresh as the primary has
# told it, however long ago its last transaction (an idle primary writes nothing to replay),
# as long as a WAL receiver is running (without one nothing tells it what it misses).
LAG_SQL = """
SELECT pg_is_in_recovery(),
       EXISTS (SELECT FROM pg_stat_wal_receiver)
         AND pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn(),
       EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())::float8
"""


class _Block:
    """A `replica_reads()` block: whether any of its reads went to the replica (shared by
    reference, so reads on other threads of the same block set it too)."""

    def __init__(self) -> None:
        self.read_replica = False


_replica_reads: ContextVar[_Block | None] = ContextVar("mortar_replica_reads", default=None)


@dataclass(frozen=True)
class ReplicaState:
    """The replica as the last probe found it."""

    state: str  # "ok", "lagging", "unavailable"
    lag_seconds: float | None = None
    error: str = ""

    @property
    def usable(self) -> bool:
        return self.state == "ok"

    def describe(self) -> str:
        if self.state == "lagging":
            lag = "unknown" if self.lag_seconds is None else f"{self.lag_seconds:.1f}s"
            return f"lagging: {lag} behind, reads go to the primary"
        if self.state == "unavailable":
            return f"unavailable, reads go to the primary: {self.error}"
        return "ok"


class _Probe:
    """The last probe's answer, shared by the process's threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.found = ReplicaState("ok")
        self.until = 0.0  # monotonic time the answer stands until

    def current(self) -> ReplicaState:
        if time.monotonic() < self.until:
            return self.found
        # One thread probes; the others go on with the last answer meanwhile (a replica
        # that takes its connect timeout to refuse must not hold every request up).
        if not self.lock.acquire(blocking=False):
            return self.found
        try:
            self._record(_measure(), PROBE_SECONDS)
        finally:
            self.lock.release()
        return self.found

    def unreachable(self, error: BaseException) -> None:
        """A read on the replica failed to connect: the primary until the retry is due."""
        with self.lock:
            self._record(ReplicaState("unavailable", error=_one_line(error)), RETRY_SECONDS)

    def _record(self, found: ReplicaState, stands_for: float) -> None:
        if found.state != self.found.state:
            log = logger.info if found.usable else logger.warning
            log("database replica: %s", found.describe())
        if found.state == "unavailable":
            stands_for = RETRY_SECONDS
        self.found = found
        self.until = time.monotonic() + stands_for

    def forget(self) -> None:
        with self.lock:
            self.found = ReplicaState("ok")
            self.until = 0.0


_probe = _Probe()


def _one_line(error: BaseException) -> str:
    return f"{error.__class__.__name__}: {' '.join(str(error).split())}"


def _measure() -> ReplicaState:
    """Ask the replica how far behind it is (on this thread's replica connection)."""
    replica = connections[REPLICA]
    try:
        with replica.cursor() as cursor:
            cursor.execute(LAG_SQL)
            in_recovery, caught_up, since_replay = cursor.fetchone()
    except DatabaseAway as error:
        replica.close()
        return ReplicaState("unavailable", error=_one_line(error))
    finally:
        # The probe's connection is not kept past the request's end anyway (CONN_MAX_AGE 0);
        # on a long-lived thread a broken one is dropped for the next probe.
        if replica.connection is not None and replica.errors_occurred and not replica.is_usable():
            replica.close()
    if not in_recovery or caught_up:
        lag = 0.0  # a promoted replica, or all that was received is applied
    else:
        lag = math.inf if since_replay is None else max(float(since_replay), 0.0)
    if lag > settings.MORTAR_REPLICA_MAX_LAG_SECONDS:
        return ReplicaState("lagging", lag_seconds=None if math.isinf(lag) else lag)
    return ReplicaState("ok", lag_seconds=lag)


def replica_configured() -> bool:
    return REPLICA in settings.DATABASES


def replica_state() -> ReplicaState | None:
    """The replica's state (probed if the last answer is old), or None with no replica."""
    return _probe.current() if replica_configured() else None


def replica_alias() -> str:
    """The database for a read that may be a little behind: the replica while it is usable."""
    state = replica_state()
    return REPLICA if state is not None and state.usable else PRIMARY


def replica_unreachable(error: BaseException) -> None:
    """Note that a read on the replica failed for its connection, and drop that connection."""
    connections[REPLICA].close()
    _probe.unreachable(error)


def forget_replica_state() -> None:
    """Probe again at the next read (for tests, and after a configuration change)."""
    _probe.forget()


@contextlib.contextmanager
def replica_reads() -> Iterator[_Block]:
    """Let the ORM reads in this block go to the replica (the router decides per read)."""
    block = _Block()
    token = _replica_reads.set(block)
    try:
        yield block
    finally:
        _replica_reads.reset(token)


@contextlib.contextmanager
def primary_reads() -> Iterator[None]:
    """Keep this block's reads on the primary, inside a `replica_reads()` block (a refresh
    that reads what it is about to write)."""
    token = _replica_reads.set(None)
    try:
        yield
    finally:
        _replica_reads.reset(token)


View = TypeVar("View", bound=Callable[..., Any])


def reads_from_replica(view: View) -> View:
    """Serve a read-only view from the replica where it may; on the primary again when the
    replica fails to answer, or has not yet got what the view looked for (a 404)."""

    def retry_on_primary(block: _Block, error: BaseException) -> bool:
        if not block.read_replica:
            return False  # the replica was not read: the error is the primary's own
        if isinstance(error, DatabaseAway):
            replica_unreachable(error)
        return True

    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_view(*args: Any, **kwargs: Any) -> Any:
            with replica_reads() as block:
                try:
                    return await view(*args, **kwargs)
                except (Http404, *DatabaseAway) as error:
                    if not retry_on_primary(block, error):
                        raise
            return await view(*args, **kwargs)

        return cast(View, async_view)

    @functools.wraps(view)
    def sync_view(*args: Any, **kwargs: Any) -> Any:
        with replica_reads() as block:
            try:
                return view(*args, **kwargs)
            except (Http404, *DatabaseAway) as error:
                if not retry_on_primary(block, error):
                    raise
        return view(*args, **kwargs)

    return cast(View, sync_view)


class ReplicaRouter:
    """Django's database router: reads in a `replica_reads()` block to a usable replica,
    everything else (and every write and migration) to the primary."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        block = _replica_reads.get()
        if block is None or model._meta.app_label in PRIMARY_ONLY_APPS:
            return None
        if not replica_configured() or connections[PRIMARY].in_atomic_block:
            return None  # a transaction on the primary reads its own writes
        alias = replica_alias()
        if alias == REPLICA:
            block.read_replica = True
        return alias

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return PRIMARY

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        return True  # one database, two copies of it

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return db == PRIMARY  # the replica gets the schema by replication


T = TypeVar("T")


def read_replica_first(read: Callable[[str], T], *, good_enough: Callable[[T], bool]) -> T:
    """`read(alias)` on the replica while it is usable, kept if `good_enough` says so; else (or
    when the replica fails to answer) on the primary. For reads that must not see a state
    older than the primary's in some respect — a run the replica does not have yet, or has
    still in progress."""
    if replica_alias() == REPLICA:
        try:
            found = read(REPLICA)
        except DatabaseAway as error:
            replica_unreachable(error)
        else:
            if good_enough(found):
                return found
    return read(PRIMARY)


def read_on(alias: str, read: Callable[[str], T]) -> T:
    """`read(alias)`, on the primary instead when `alias` is the replica and it fails to
    answer (it went away since it was chosen)."""
    if alias != REPLICA:
        return read(alias)
    try:
        return read(REPLICA)
    except DatabaseAway as error:
        replica_unreachable(error)
    return read(PRIMARY)
