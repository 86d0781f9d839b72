"""Accept a request: give it its run (the completion id), and take in its body against the
limit."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from accounts.models import ApiKey
from core.errors import RequestTooLarge
from core.http.requests import ApiRequest
from core.ids import new_hex_id

# A refused body is kept for debugging, but a 4 MiB one is not worth keeping whole.
REFUSED_BODY_KEEP_BYTES = 64 * 1024


@dataclass(frozen=True)
class Accepted:
    completion_id: str  # the run id too, and a completion's or a message's id
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


@dataclass(frozen=True)
class Received:
    """What arrived, stored with the run whatever happens next: the key it came with, its
    request id and its body (one over the limit only in part)."""

    key_id: int
    request_id: str
    body: bytes
    size: int  # every byte the client sent

    @property
    def too_large(self) -> bool:
        return self.size > settings.MORTAR_MAX_BODY_BYTES

    def within_limit(self) -> bytes:
        """The body; over the limit it is a 413."""
        if self.too_large:
            raise too_large(self.size)
        return self.body


def receive(request: ApiRequest, key: ApiKey) -> Received:
    """The request as received (the first 64 KiB of a body over the limit)."""
    body, size = request.body, request.body_size
    if size > settings.MORTAR_MAX_BODY_BYTES:
        body = body[:REFUSED_BODY_KEEP_BYTES]
    return Received(key_id=key.id, request_id=request.request_id, body=body, size=size)


def body_within_limit(request: ApiRequest) -> bytes:
    """The body of a request that is not a run (counting tokens); over the limit it is a 413."""
    body, size = request.body, request.body_size
    if size > settings.MORTAR_MAX_BODY_BYTES:
        raise too_large(size)
    return body


def too_large(size: int) -> RequestTooLarge:
    limit = settings.MORTAR_MAX_BODY_BYTES
    return RequestTooLarge(f"The request body is {size} bytes; the limit is {limit} bytes (4 MiB).")
