"""Liveness and readiness: /healthz answers while the process runs, /readyz checks its parts.

/readyz needs no sign-in (load balancers call it), so what it tells anyone is only the release it
runs (`version`, so a rollout can be watched) and whether each part is ok: a failure's text
names hosts and ports ("connection to server at 10.0.0.5, port 5432 failed"), which is for
operators. A signed-in staff member (a dashboard session) gets the text too; the server's log
always has it. The session is read from the database, so while the database is down nobody
can be recognised as staff and everyone gets the short answer.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, HttpResponse

from core.backplane import Backplane, backplane
from core.http.responses import json_response
from mortar import __version__

logger = logging.getLogger(__name__)

OK = "ok"
UNAVAILABLE = "unavailable"


def _database_error() -> Exception | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return None
    except Exception as exc:  # readiness reports any failure, it doesn't raise it
        return exc


# Counted up to this many: a probe every few seconds must stay cheap even if the guard filled.
DEFAULT_PARTITION_COUNT_LIMIT = 1000


def _partitions_warning() -> str | None:
    """A warning when the run store's default partitions hold rows (Postgres): the day
    partitions were not created ahead of their day (`telemetry.store.partitions`). Rows there
    are kept and served; retention cannot drop them by the day."""
    from telemetry.store.partitions import default_partition_rows

    try:
        rows = default_partition_rows(limit=DEFAULT_PARTITION_COUNT_LIMIT)
    except Exception as exc:  # readiness reports, it doesn't raise
        logger.warning("readyz: default partitions not read: %r", exc)
        return None
    if not rows:
        return None
    more = "+" if rows >= DEFAULT_PARTITION_COUNT_LIMIT else ""
    logger.warning("readyz: the run store's default partitions hold %d%s rows", rows, more)
    return (
        f"warning: the default partitions hold {rows}{more} rows; day partitions are missing"
        " (run telemetry.tasks.ensure_run_partitions, or `manage.py migrate`)"
    )


async def _backplane_error(plane: Backplane) -> Exception | None:
    try:
        await plane.ping()
        return None
    except Exception as exc:
        return exc


async def _is_staff(request: HttpRequest) -> bool:
    """Whether the request comes from a signed-in staff member; no when that cannot be read."""
    if not hasattr(request, "auser"):
        return False
    try:
        user = await request.auser()
    except Exception:  # the session lives in the database, which may be what is down
        return False
    return bool(user.is_active and user.is_staff)


def _state(name: str, error: Exception | None, *, detailed: bool) -> str:
    if error is None:
        return OK
    logger.warning("readyz: %s unavailable: %r", name, error)
    if detailed:
        return f"{UNAVAILABLE}: {error.__class__.__name__}: {' '.join(str(error).split())}"
    return UNAVAILABLE


def _writer(status: dict[str, Any], *, detailed: bool) -> dict[str, Any]:
    """The run writers' status; the last error's text (the database's address) for staff only."""
    last_error = status.get("last_error")
    if last_error is None or detailed:
        return status
    kind = str(last_error["message"]).partition(":")[0]  # "OperationalError: connection to …"
    return {**status, "last_error": {**last_error, "message": kind}}


async def healthz(request: HttpRequest) -> HttpResponse:
    return json_response({"ok": True})


async def readyz(request: HttpRequest) -> HttpResponse:
    from telemetry.store.running import writer_status

    plane = backplane()
    database_error = await sync_to_async(_database_error)()
    backplane_error = await _backplane_error(plane)
    detailed = await _is_staff(request)
    checks: dict[str, object] = {
        "database": _state("database", database_error, detailed=detailed),
        # "redis", or "memory" on the embedded default
        plane.name: _state(plane.name, backplane_error, detailed=detailed),
        "run_writer": _writer(writer_status(), detailed=detailed),
    }
    if database_error is None:
        # Still ready: the rows are stored, only not where retention drops them by the day.
        warning = await sync_to_async(_partitions_warning)()
        if warning is not None:
            checks["partitions"] = warning
    ok = database_error is None and backplane_error is None
    return json_response({"ok": ok, "version": __version__, **checks}, status=200 if ok else 503)
