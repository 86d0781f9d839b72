from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _partitions_ahead(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """After `migrate`, the run store's day partitions from today on (a fresh install, a test
    database, a deployment whose scheduled tasks do not run yet): Postgres only."""
    from django.db import connections

    if connections[using].vendor != "postgresql" or using != "default":
        return
    from telemetry.store.partitions import ensure_partitions_ahead

    ensure_partitions_ahead()


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from telemetry.metrics import writer_depth
        from telemetry.store.gauges import writer_depth_to

        post_migrate.connect(_partitions_ahead, sender=self, dispatch_uid="run-store-partitions")
        # The run store imports nothing above it: the metrics are handed down to its writers.
        writer_depth_to(writer_depth)
