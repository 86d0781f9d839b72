"""Requests Mortar makes of itself for a key it already holds: the API's re-runs and the
dashboard's playground and re-runs.

They enter the pipeline where an authenticated request does (`complete`), as an `ApiRequest`
built here: the same steps, run store, budgets, limits and telemetry as a client's
request, and no loopback HTTP call — staff choose a key, but never know its secret (keys are
stored hashed).
"""

from __future__ import annotations

from collections.abc import Mapping

from django.http import HttpResponse

from accounts.models import ApiKey
from core.http.requests import ApiRequest, RequestHeaders
from core.http.responses import EventStreamResponse
from gateway.contract.surface import Surface
from gateway.pipeline import complete


def internal_request(
    *, surface: Surface, body: bytes, headers: Mapping[str, str], request_id: str
) -> ApiRequest:
    """A request on the surface's own route, with these headers and body."""
    return ApiRequest(
        method="POST",
        path=surface.path,
        body=body,
        body_size=len(body),
        headers=RequestHeaders(
            (name.encode("latin-1", "replace"), value.encode("latin-1", "replace"))
            for name, value in headers.items()
        ),
        request_id=request_id,
    )


async def send_for_key(
    *,
    key: ApiKey,
    surface: Surface,
    body: bytes,
    headers: Mapping[str, str],
    request_id: str,
    rerun_of: str | None = None,
) -> HttpResponse | EventStreamResponse:
    """Send `body` as `key` (its organization loaded), through the whole pipeline: the answer a
    client would get, and a run stored like any other."""
    request = internal_request(surface=surface, body=body, headers=headers, request_id=request_id)
    return await complete(request, key, surface, rerun_of=rerun_of)


async def drained(response: HttpResponse | EventStreamResponse) -> None:
    """Read a streamed answer to its end, as a client that stays would (the run is recorded
    whole), and finish it."""
    if not isinstance(response, EventStreamResponse):
        return
    try:
        async for _ in response:
            pass
    finally:
        response.finished()
