"""The dashboard's one action: stopping a generation in flight."""

from __future__ import annotations

from gateway.coordination.stop import live_generations
from telemetry.models import Run


async def generation_stop(*, run_id: str) -> bool:
    """Stop the run's generation on whichever worker runs it; True if it was stopped.

    The stop is scoped to the run's own organization, as the API's stop is: the dashboard
    acts for staff across organizations, the registry's compare-and-delete stays the judge of
    whether the generation is still running.
    """
    organization_id = (
        await Run.objects.filter(pk=run_id, status=Run.Status.IN_PROGRESS)
        .values_list("organization_id", flat=True)
        .afirst()
    )
    if organization_id is None:
        return False
    return await live_generations().stop(run_id, organization_id)
