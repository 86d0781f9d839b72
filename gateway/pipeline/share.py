"""Answer a dedupe follower: the leader's answer returned as this request's own, stored as a run
of its own that costs nothing (the leader's run carries the generation's cost)."""

from __future__ import annotations

import asyncio

from django.http import HttpResponse

from core.errors import MortarError
from gateway.coordination.dedupe import Answer, Claim
from gateway.errors import UpstreamTimeout
from gateway.runs.run import Outcome, RunInFlight, Usage
from gateway.runs.stages import Admitted, Held
from telemetry.models import Run


async def share(run: RunInFlight, held: Held, claim: Claim) -> HttpResponse:
    """Wait for the leader's answer (as long as its generation may take), and return it."""
    try:
        async with asyncio.timeout(held.planned.resolved.deployment.total_timeout_s + 30):
            answer = await claim.wait()
    except TimeoutError:
        return await run.refused(UpstreamTimeout("The shared generation took too long."))
    except MortarError as error:
        return await run.refused(error)
    run.reach(Admitted(held, dedupe_role="shared", answered_by=claim.leader_id))
    response = HttpResponse(
        answer.body, status=answer.status, content_type=answer.content_type, headers=run.headers()
    )
    run.chunk(answer.body)
    run.close(
        Outcome(
            Run.Status.COMPLETED if answer.status == 200 else Run.Status.FAILED,
            http_status=answer.status,
            usage=shared_usage(answer, run),
        )
    )
    await run.settled()
    return response


def shared_usage(answer: Answer, run: RunInFlight) -> Usage | None:
    """The leader's usage, as the shared body reports it (recorded, never billed twice)."""
    if answer.status != 200 or not answer.content_type.startswith("application/json"):
        return None
    counts = run.accepted.surface.shared_usage(answer.body)
    return None if counts is None else Usage(counts, Run.UsageSource.UPSTREAM)
