"""The run writer's gauges, as the store reports them: the metrics that show them sit above the
run store, so the telemetry app hands their setter down at start-up (`writer_depth_to`)."""

from __future__ import annotations

from collections.abc import Callable

DepthGauge = Callable[[int, int], None]  # rows queued, rows spooled


def _unreported(queued: int, spooled: int) -> None:
    """Until the app hands its metrics down, when Django starts."""


_depth_gauge: DepthGauge = _unreported


def writer_depth_to(gauge: DepthGauge) -> None:
    """Have every run writer of this process report its depth to `gauge` from now on."""
    global _depth_gauge
    _depth_gauge = gauge


def report_writer_depth(queued: int, spooled: int) -> None:
    """Report a writer's rows queued and rows spooled (once a batch, never per row)."""
    _depth_gauge(queued, spooled)
