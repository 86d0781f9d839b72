"""Finish a request that does not generate: an answer shared from a leader."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

from django.http import HttpResponse

from core.errors import MortarError, UpstreamTimeout
from gateway.coordination.dedupe import Answer, Claim
from gateway.pipeline.plan import Plan
from gateway.pipeline.record import RunRecord
from telemetry.models import Run


async def share(claim: Claim, record: RunRecord) -> HttpResponse:
    """Return the leader's answer as this request's own, stored as a run of its own.

    A shared run costs nothing: the leader's run carries the generation's cost.
    """
    plan = record.plan
    assert plan.deployment is not None
    try:
        async with asyncio.timeout(plan.deployment.total_timeout_s + 30):
            answer = await claim.wait()
    except TimeoutError:
        return await record.refused(UpstreamTimeout("The shared generation took too long."))
    except MortarError as error:
        return await record.refused(error)
    plan.dedupe_role, plan.answered_by = "shared", claim.leader_id
    response = HttpResponse(
        answer.body, status=answer.status, content_type=answer.content_type, headers=plan.headers()
    )
    usage = shared_usage(answer, plan)
    record.recorder.chunk(answer.body)
    record.close(
        Run.Status.COMPLETED if answer.status == 200 else Run.Status.FAILED,
        http_status=answer.status,
        usage=usage,
        usage_source=Run.UsageSource.UPSTREAM if usage else "",
        completion_tokens=(usage or {}).get("completion_tokens"),
        total_tokens=(usage or {}).get("total_tokens"),
        cost=Decimal(0),
    )
    await record.settled()
    return response


def shared_usage(answer: Answer, plan: Plan) -> dict[str, Any] | None:
    """The leader's usage, as the shared body reports it (recorded, but never billed twice)."""
    if answer.status != 200 or not answer.content_type.startswith("application/json"):
        return None
    return plan.surface.shared_usage(answer.body)
