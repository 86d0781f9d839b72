"""Liveness and readiness: /healthz answers while the process runs, /readyz checks its parts."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse

from gateway.responses import json_response


def _database_ok() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # readiness reports any failure, it doesn't raise it
        return f"error: {exc.__class__.__name__}"


async def _redis_ok() -> str | None:
    if not settings.REDIS_URL:
        return None
    import redis.asyncio as redis

    client = redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        await client.ping()
        return "ok"
    except Exception as exc:
        return f"error: {exc.__class__.__name__}"
    finally:
        await client.aclose()


async def healthz(request: HttpRequest) -> HttpResponse:
    return json_response({"ok": True})


async def readyz(request: HttpRequest) -> HttpResponse:
    from telemetry.writer import writer_status

    checks: dict[str, object] = {"database": await sync_to_async(_database_ok)()}
    redis_state = await _redis_ok()
    if redis_state is not None:
        checks["redis"] = redis_state
    checks["run_writer"] = writer_status()
    ok = all(value == "ok" for key, value in checks.items() if key != "run_writer")
    return json_response({"ok": ok, **checks}, status=200 if ok else 503)
