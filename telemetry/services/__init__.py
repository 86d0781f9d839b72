"""Writes of the run store that run outside the request path: retention and usage rollups."""

from telemetry.services.retention import (
    PurgeCounts,
    organization_runs_purge,
    runs_purge_expired,
)
from telemetry.services.rollups import (
    RollupCounts,
    usage_rollup_hour_recompute,
    usage_rollup_hours_touched,
    usage_rollups_catch_up,
    usage_rollups_refresh,
)

__all__ = [
    "PurgeCounts",
    "RollupCounts",
    "organization_runs_purge",
    "runs_purge_expired",
    "usage_rollup_hour_recompute",
    "usage_rollup_hours_touched",
    "usage_rollups_catch_up",
    "usage_rollups_refresh",
]
