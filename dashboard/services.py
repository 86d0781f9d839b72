"""The dashboard's actions: stopping a generation in flight, refreshing the usage rollups."""

from __future__ import annotations

from django.conf import settings

from core.db_routing import primary_reads
from gateway.coordination.stop import live_generations
from telemetry.models import Run
from telemetry.services.rollups import usage_rollups_keep_fresh


def usage_rollups_refresh_without_beat() -> None:
    """Refresh the rollups in-process where no beat does (`MORTAR_ROLLUPS_IN_PROCESS`)."""
    if settings.MORTAR_ROLLUPS_IN_PROCESS:
        # It reads the rollups it is about to bring up to date: from the primary, even on a
        # page whose own reads go to a replica.
        with primary_reads():
            usage_rollups_keep_fresh()


async def generation_stop(*, run_id: str, organizations: frozenset[int] | None = None) -> bool:
    """Stop the run's generation on whichever worker runs it, if it is one of `organizations`'
    (None: any); True if it was stopped.

    The stop is scoped to the run's own organization, as the API's stop is: the dashboard
    acts for staff across organizations, the registry's compare-and-delete stays the judge of
    whether the generation is still running.
    """
    in_progress = Run.objects.filter(pk=run_id, status=Run.Status.IN_PROGRESS)
    if organizations is not None:
        in_progress = in_progress.filter(organization_id__in=organizations)
    organization_id = await in_progress.values_list("organization_id", flat=True).afirst()
    if organization_id is None:
        return False
    return await live_generations().stop(run_id, organization_id)
