"""Accept a request: give it its run (the completion id), and take in its body against the
limit."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.conf import settings

from accounts.models import ApiKey
from core.http.requests import ApiRequest
from core.ids import new_hex_id
from gateway.contract.surface import Surface
from gateway.errors import RequestTooLarge
from gateway.runs.stages import Accepted
from telemetry.leases import worker_of_new_runs

# A refused body is kept for debugging, but a 4 MiB one is not worth keeping whole.
REFUSED_BODY_KEEP_BYTES = 64 * 1024


def accept(
    request: ApiRequest, key: ApiKey, surface: Surface, *, rerun_of: str | None = None
) -> Accepted:
    """The request's run: its id — the surface's prefix and 24 hex, `chatcmpl-…` for a chat
    completion, `msg_…` for a message — its acceptance time, and what arrived (the first
    64 KiB of a body over the limit)."""
    now, started = time.time(), time.perf_counter()
    body, size = request.body, request.body_size
    if size > settings.MORTAR_MAX_BODY_BYTES:
        body = body[:REFUSED_BODY_KEEP_BYTES]
    return Accepted(
        run_id=f"{surface.id_prefix}{new_hex_id()}",
        surface=surface,
        key=key,
        organization=key.organization,
        accepted_at=datetime.fromtimestamp(now, UTC),
        started=started,
        created=int(now),
        route=request.path,
        request_id=request.request_id,
        body=body,
        size=size,
        worker=worker_of_new_runs(),
        rerun_of=rerun_of,
    )


def body_within_limit(accepted: Accepted) -> bytes:
    """The body; over the limit it is a 413."""
    if accepted.too_large:
        raise too_large(accepted.size)
    return accepted.body


def request_body_within_limit(request: ApiRequest) -> bytes:
    """The body of a request that is not a run (counting tokens); over the limit it is a 413."""
    if request.body_size > settings.MORTAR_MAX_BODY_BYTES:
        raise too_large(request.body_size)
    return request.body


def too_large(size: int) -> RequestTooLarge:
    limit = settings.MORTAR_MAX_BODY_BYTES
    return RequestTooLarge(f"The request body is {size} bytes; the limit is {limit} bytes (4 MiB).")
