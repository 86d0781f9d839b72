"""The Prometheus metrics of a Mortar process, and recording them once per request.

Every metric is recorded at one seam: when a run closes (`RunSink.closed`), from the run's
own fields — its route, model, HTTP status, duration, time to first token, usage and cost. Only
the inflight gauge moves when a run opens, the upstream errors count where a model server
fails, and the writer's gauges are set by the writer's loop once per batch (through
`writer_depth`, which `telemetry.apps` hands down to the run store below). Nothing is recorded
per chunk.

A labelled metric's series would appear only with its first event, and an alert could not tell
"none yet" from "missing": the label sets Mortar knows of — each catalog model's cost and
tokens, each forwarding deployment's upstream errors by every code they can have — are exposed
at 0 from the first scrape (`expose_known_labels`, with what the gateway registers through
`known_labels_from`).

The metrics live in prometheus-client's multiprocess mode (see `telemetry.metrics_dir`), so the
worker processes of one server answer `/metrics` with one consistent set. They are created on
first use, after the directory is chosen: prometheus_client picks its storage when its first
metric is made.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Generic, TypeVar

from django.db import DatabaseError

from telemetry.metrics_dir import use_metrics_dir
from telemetry.store.fields import RunFields

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

logger = logging.getLogger(__name__)

# Seconds: a JSON reply takes milliseconds, a long stream minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)


M = TypeVar("M", "Counter", "Histogram")

TOKEN_KINDS = ("prompt", "completion", "cached")


class Labelled(Generic[M]):
    """A labelled metric's children by their label values, looked up in a dict: prometheus'
    own `labels()` checks the values each time, most of a microsecond a call."""

    def __init__(self, metric: M) -> None:
        self.metric: M = metric
        self.children: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = self.metric.labels(*values)
        return child


@dataclass(frozen=True)
class Metrics:
    requests: Labelled[Counter]
    duration: Labelled[Histogram]
    time_to_first_token: Labelled[Histogram]
    tokens: Labelled[Counter]
    cost: Labelled[Counter]
    inflight: Gauge
    upstream_errors: Labelled[Counter]
    writer_queue_depth: Gauge
    writer_spooled_rows: Gauge


@functools.cache
def metrics() -> Metrics:
    """This process's metrics, made on first use in the server's metrics directory."""
    _, dead = use_metrics_dir()
    # Imported only now: the directory must be in the environment before prometheus_client
    # makes its first metric.
    from prometheus_client import Counter, Gauge, Histogram, multiprocess

    for pid in dead:  # a worker that died: its live gauges no longer count
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
    return Metrics(
        requests=Labelled(
            Counter(
                "mortar_requests_total",
                "Requests that were runs, by route, model and HTTP status.",
                ["route", "model", "status"],
            )
        ),
        duration=Labelled(
            Histogram(
                "mortar_request_duration_seconds",
                "From acceptance to the last byte of the reply (a whole stream).",
                ["route", "model"],
                buckets=DURATION_BUCKETS,
            )
        ),
        time_to_first_token=Labelled(
            Histogram(
                "mortar_time_to_first_token_seconds",
                "From acceptance to the reply's first token.",
                ["model"],
                buckets=TTFT_BUCKETS,
            )
        ),
        tokens=Labelled(
            Counter(
                "mortar_tokens_total",
                "Tokens of generated runs: prompt, completion, and the prompt's cached part.",
                ["model", "kind"],
            )
        ),
        cost=Labelled(
            Counter("mortar_cost_usd_total", "What generated runs cost, in USD.", ["model"])
        ),
        inflight=Gauge(
            "mortar_inflight_generations",
            "Runs open now (accepted, not yet closed).",
            multiprocess_mode="livesum",
        ),
        upstream_errors=Labelled(
            Counter(
                "mortar_upstream_errors_total",
                "Model server failures: a replica that failed or refused, by deployment and code.",
                ["deployment", "code"],
            )
        ),
        writer_queue_depth=Gauge(
            "mortar_run_writer_queue_depth",
            "Rows queued in memory for the run store.",
            multiprocess_mode="livesum",
        ),
        writer_spooled_rows=Gauge(
            "mortar_run_writer_spooled_rows",
            "Rows spooled to disk, waiting for the database.",
            multiprocess_mode="livesum",
        ),
    )


def run_opened() -> None:
    metrics().inflight.inc()


def run_closed(
    run: RunFields, *, route: str, seconds: float, first_token_seconds: float | None, opened: bool
) -> None:
    """Count a closed run: its request, duration, first token, tokens and cost."""
    m = metrics()
    model = run.get("model", "")
    if opened:
        m.inflight.dec()
    m.requests(route, model, str(run.get("http_status") or "")).inc()
    m.duration(route, model).observe(seconds)
    if first_token_seconds is not None:
        m.time_to_first_token(model).observe(first_token_seconds)
    if run.get("dedupe_role") == "shared" or run.get("usage") is None:
        # A shared run: the leader's run counted the generation. No usage: refused before
        # generating (the prompt was counted, never sent).
        return
    prompt, completion = run.get("prompt_tokens"), run.get("completion_tokens")
    cached, cost = run.get("cached_tokens"), run.get("cost")
    if prompt:
        m.tokens(model, "prompt").inc(prompt)
    if completion:
        m.tokens(model, "completion").inc(completion)
    if cached:
        m.tokens(model, "cached").inc(cached)
    if cost:
        m.cost(model).inc(float(cost) if isinstance(cost, Decimal) else cost)


@dataclass(frozen=True)
class KnownLabels:
    """What the metrics can be labelled with before anything happened."""

    models: Sequence[str]
    deployments: Sequence[str]  # those that forward to model servers
    # Every code a model server's failure is counted under, for each of those deployments.
    upstream_error_codes: Sequence[str] = ()


_label_sources: list[Callable[[], KnownLabels]] = []


def known_labels_from(source: Callable[[], KnownLabels]) -> None:
    """Have `expose_known_labels` ask `source` (an app above this one: the gateway's catalog)."""
    if source not in _label_sources:
        _label_sources.append(source)


def expose_known_labels() -> None:
    """Make the known label sets' series, at 0 until something is counted (a series is only
    made once a process: the next calls are dict lookups)."""
    m = metrics()
    for source in _label_sources:
        try:
            known = source()
        except DatabaseError:  # the scrape still answers, with what was made before
            logger.warning("metrics: the known label sets were not read", exc_info=True)
            continue
        for model in known.models:
            m.cost(model)
            for kind in TOKEN_KINDS:
                m.tokens(model, kind)
        for deployment in known.deployments:
            for code in known.upstream_error_codes:
                m.upstream_errors(deployment, code)


def upstream_failed(deployment: str, code: str) -> None:
    metrics().upstream_errors(deployment, code).inc()


def writer_depth(queued: int, spooled: int) -> None:
    m = metrics()
    try:
        m.writer_queue_depth.set(queued)
        m.writer_spooled_rows.set(spooled)
    except OSError:  # the metrics files' disk is full: the writer goes on all the same
        logger.warning("run writer: its gauges were not recorded", exc_info=True)
