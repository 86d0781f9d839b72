"""Liveness and readiness: /healthz answers while the process runs, /readyz checks its parts."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, HttpResponse

from core.backplane import Backplane, backplane
from core.http.responses import json_response


def _database_ok() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # readiness reports any failure, it doesn't raise it
        return f"error: {exc.__class__.__name__}"


async def _backplane_ok(plane: Backplane) -> str:
    try:
        await plane.ping()
        return "ok"
    except Exception as exc:
        return f"error: {exc.__class__.__name__}"


async def healthz(request: HttpRequest) -> HttpResponse:
    return json_response({"ok": True})


async def readyz(request: HttpRequest) -> HttpResponse:
    from telemetry.writer import writer_status

    plane = backplane()
    checks: dict[str, object] = {
        "database": await sync_to_async(_database_ok)(),
        plane.name: await _backplane_ok(plane),  # "redis", or "memory" on the embedded default
        "run_writer": writer_status(),
    }
    ok = all(value == "ok" for key, value in checks.items() if key != "run_writer")
    return json_response({"ok": ok, **checks}, status=200 if ok else 503)
