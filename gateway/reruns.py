"""Re-run a stored run: send its request again — as it was, or with fields replaced — as a new
run that records its origin: replay re-emits what was sent, and debugging needs the request
sent again.

The re-run goes through the same pipeline as the request it repeats (`gateway.inprocess`), on
the surface the original came in on (a `msg_…` run is a Messages request), for a key of the
original's organization: another organization's run is as gone as an unknown one (410, like
replay). What is sent is the stored body as it was received (images put back), with each field
of the overrides replacing the stored one; the merged body is validated like any request, and a
refusal is a run of its own too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from django.http import HttpResponse

from accounts.models import ApiKey, Organization
from core.db import database_read
from core.http.responses import EventStreamResponse
from core.ids import is_run_id
from gateway.contract.surface import Surface, surface_of_run
from gateway.contract.validation import parse_json_body
from gateway.errors import InvalidJson
from gateway.inprocess import send_for_key
from telemetry.errors import RunGone
from telemetry.models import Run
from telemetry.stored_bodies import stored_body_as_received

# A run id fresh from a response may reach the database a writer batch later (as on replay).
NOT_YET_STORED_WAIT = 0.5


@dataclass(frozen=True)
class RerunSource:
    """A stored run's request, ready to be sent again."""

    run_id: str
    surface: Surface
    body: bytes  # as received, images put back in


def run_gone(run_id: str) -> RunGone:
    return RunGone(f"Run {run_id} is gone: unknown, expired, or not this organization's.")


async def rerun_source(run_id: str, organization: Organization) -> RerunSource:
    """The request of the organization's run `run_id`; RunGone when there is none to send."""
    if not is_run_id(run_id):
        raise run_gone(run_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + NOT_YET_STORED_WAIT
    found = await _stored_request(run_id, organization.id)
    while found is None and loop.time() < deadline:
        await asyncio.sleep(0.05)
        found = await _stored_request(run_id, organization.id)
    if found is None:
        raise run_gone(run_id)
    body, truncated = found
    if body is None or truncated:
        kept = "metadata only (retention=metadata)" if body is None else "its first bytes only"
        raise RunGone(
            f"Run {run_id} has no request to send again: Mortar kept {kept} of it.",
            code="request_not_kept",
        )
    surface = surface_of_run(run_id)
    if surface is None:  # stored by no surface Mortar serves now
        raise run_gone(run_id)
    return RerunSource(run_id=run_id, surface=surface, body=body)


async def _stored_request(run_id: str, organization_id: int) -> tuple[bytes | None, bool] | None:
    """The run's request as received, and whether only its first bytes were kept; read on a
    connection that works (`core.db`)."""

    def read() -> tuple[bytes | None, bool] | None:
        row = (
            Run.objects.filter(pk=run_id, organization_id=organization_id)
            .values_list("request_body", "request_truncated")
            .first()
        )
        if row is None:
            return None
        return stored_body_as_received(run_id, row[0]), row[1]

    return await database_read(read)


def body_with_overrides(stored: bytes, overrides: Mapping[str, Any]) -> bytes:
    """The stored body with each field of `overrides` in place of its own (`null` removes
    one, as a field sent as `null` counts as absent)."""
    if not overrides:
        return stored
    try:
        original = orjson.loads(stored)
    except orjson.JSONDecodeError:
        original = None
    if not isinstance(original, dict):
        raise InvalidJson(
            "The stored request is not a JSON object, so no field of it can be replaced; "
            "re-run it as it was (no body)."
        )
    return orjson.dumps({**original, **overrides})


def overrides_of(body: bytes) -> dict[str, Any]:
    """The overrides a re-run's body holds: none when it is empty, else one JSON object."""
    if not body.strip():
        return {}
    return parse_json_body(body)


async def rerun_send(
    *,
    source: RerunSource,
    key: ApiKey,
    body: bytes,
    headers: Mapping[str, str],
    request_id: str,
) -> HttpResponse | EventStreamResponse:
    """Send `body` as a re-run of `source`, as `key` (a key of the run's organization)."""
    return await send_for_key(
        key=key,
        surface=source.surface,
        body=body,
        headers=headers,
        request_id=request_id,
        rerun_of=source.run_id,
    )


async def rerun(
    *,
    run_id: str,
    key: ApiKey,
    overrides: bytes,
    headers: Mapping[str, str],
    request_id: str,
) -> HttpResponse | EventStreamResponse:
    """`POST /v1/chat/completions/runs/{run_id}/rerun`: the key's organization's run sent again,
    with the body's fields replacing the stored ones."""
    source = await rerun_source(run_id, key.organization)
    changes = overrides_of(overrides)
    return await rerun_send(
        source=source,
        key=key,
        body=body_with_overrides(source.body, changes),
        headers=headers,
        request_id=request_id,
    )
