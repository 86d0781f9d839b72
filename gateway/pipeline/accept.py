"""Accept a request: give it its run (the completion id), and read its body against the limit."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from accounts.models import ApiKey, Organization
from core.errors import RequestTooLarge
from core.http.requests import ApiRequest
from core.ids import new_hex_id
from telemetry.events import event_publisher
from telemetry.leases import worker_of_new_runs
from telemetry.recording import RunRecorder
from telemetry.store.running import run_writer

# A refused body is kept for debugging, but a 4 MiB one is not worth keeping whole.
REFUSED_BODY_KEEP_BYTES = 64 * 1024


@dataclass(frozen=True)
class Accepted:
    completion_id: str  # the run id too (PRODUCT.md decision 11), and a message's id
    accepted_at: datetime
    created: int


def accept(id_prefix: str) -> Accepted:
    """Give the request its id — the surface's prefix and 24 hex: `chatcmpl-…` for a chat
    completion, `msg_…` for a message — and its acceptance time."""
    now = time.time()
    return Accepted(
        completion_id=f"{id_prefix}{new_hex_id()}",
        accepted_at=datetime.fromtimestamp(now, UTC),
        created=int(now),
    )


def run_recorder(accepted: Accepted, key: ApiKey, request: ApiRequest) -> RunRecorder:
    """The recorder of the request's run: a run of the key's organization from now on."""
    organization = key.organization
    recorder = RunRecorder(
        run_id=accepted.completion_id,
        accepted_at=accepted.accepted_at,
        organization_id=organization.id,
        writer=run_writer(),
        worker=worker_of_new_runs(),
        events=event_publisher(),
        keep_content=organization.retention == Organization.Retention.FULL,
        route=request.path,
        organization=organization.name,
    )
    recorder.set(api_key_id=key.id, request_id=request.request_id)
    return recorder


def read_body(request: ApiRequest, recorder: RunRecorder) -> bytes:
    """The body as received, recorded with the run; over the limit it is a 413."""
    body, size = request.body, request.body_size
    if size > settings.MORTAR_MAX_BODY_BYTES:
        recorder.set(
            request_body=body[:REFUSED_BODY_KEEP_BYTES],
            request_bytes=size,
            request_truncated=True,
        )
        raise too_large(size)
    recorder.set(request_body=body, request_bytes=len(body))
    return body


def body_within_limit(request: ApiRequest) -> bytes:
    """The body of a request that is not a run (counting tokens); over the limit it is a 413."""
    body, size = request.body, request.body_size
    if size > settings.MORTAR_MAX_BODY_BYTES:
        raise too_large(size)
    return body


def too_large(size: int) -> RequestTooLarge:
    limit = settings.MORTAR_MAX_BODY_BYTES
    return RequestTooLarge(f"The request body is {size} bytes; the limit is {limit} bytes (4 MiB).")
