"""The page an outage gets: 503, saying which backend cannot be reached, instead of a 500.

A page needs the database (the session, the staff account, what it shows) and some need Redis
(the cache the usage rollups keep their watermark in). When either is out of reach the request
fails wherever it first touches it — a middleware, the view, its template — so the outage is
recognised in the server-error handler (`config/urls.py`), from the exception being handled.
"""

from __future__ import annotations

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpResponse
from django.template.loader import render_to_string

from core.backplane import out_of_reach

RETRY_AFTER_SECONDS = 5
DATABASE = "the database"
REDIS = "Redis (the state the workers share)"


def unavailable_backend(error: BaseException | None) -> str | None:
    """The backend the error says is out of reach, or None for any other error."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        # OperationalError: refused, cut or timed out (psycopg and SQLite say so alike);
        # InterfaceError: a connection that is already closed. A DataError is not an outage.
        if isinstance(error, OperationalError | InterfaceError):
            return DATABASE
        if isinstance(error, DatabaseError):
            return None
        if out_of_reach(error):
            return REDIS
        error = error.__cause__ or error.__context__
    return None


def outage_page(backend: str) -> HttpResponse:
    """503 with a page that says what is out of reach. Rendered without the request: its
    context (the signed-in user) would need the very database that may be down."""
    return HttpResponse(
        render_to_string(
            "dashboard/unavailable.html",
            {"backend": backend, "retry_after": RETRY_AFTER_SECONDS},
        ),
        status=503,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )
