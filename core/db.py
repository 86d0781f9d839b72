"""Database access from long-lived threads: the hot path's reads and the run writer's batches.

Django's request handler gives every request a thread of its own under ASGI, opens a connection
there, and closes it when the request ends (`CONN_MAX_AGE` 0: a connection kept open would be
left behind with its thread, one per request, until Postgres refuses new clients). The hot
path's reads (keys and models on a cache miss) run on the event loop's shared worker threads and
the run writer on a thread of its own: there a connection is kept for as long as it works, and
replaced as soon as it does not — a Postgres restart or failover terminates every backend, and
the next read or batch must not fail for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connection

T = TypeVar("T")

# What a dropped or refused connection raises.
DatabaseAway = (OperationalError, InterfaceError)


def drop_broken_connection() -> None:
    """Close this thread's connection if an error has left it unusable (the next query
    reconnects); keep a healthy one, however old."""
    if (
        connection.connection is not None
        and connection.errors_occurred
        and not connection.is_usable()
    ):
        connection.close()


def on_a_working_connection(call: Callable[[], T]) -> T:
    """Call `call` (database work) on this thread's connection, or a new one if it was cut."""
    drop_broken_connection()
    try:
        return call()
    except DatabaseAway:
        # The connection may have been cut since the last call (a restart, a failover):
        # once more, on a new one. A database that is really away fails again.
        connection.close()
        return call()


async def database_read(read: Callable[[], T]) -> T:
    """Run a synchronous ORM read on a worker thread, on a connection that works."""
    return await sync_to_async(on_a_working_connection, thread_sensitive=False)(read)


async def database_call_on(executor: Executor, call: Callable[[], T]) -> T:
    """Run `call` on one of `executor`'s threads, on a connection that works: a bare executor
    hop, for the hot path's own calls (asgiref's `sync_to_async` costs three times as much:
    bench/results, "ledger")."""
    return await asyncio.get_running_loop().run_in_executor(executor, on_a_working_connection, call)
