"""Where a run's records go as it happens: its row and every chunk exactly as it was sent (to the
run writer's queue), live events, metrics and the log line.

`RunSink` is a sink and nothing more: the run (the gateway's `Run`) owns its facts and says
what to record and when; the sink keeps none of them. Nothing here waits on the database or
Redis: rows go to the run writer's queue, events to the event publisher's queue. Under an
organization's `metadata` retention no prompt or reply text is kept (no request body, no
chunks), except the body of a request refused with 400, kept for debugging until the
retention purge removes it after 7 days.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from core.tracing import step
from telemetry import metrics
from telemetry.events import EventPublisher, event_publisher
from telemetry.models import Run
from telemetry.request_log import request_logged
from telemetry.store.fields import ImageRecord, RunFields
from telemetry.store.items import ChunkSent, RunClosed, RunOpened
from telemetry.store.running import run_writer
from telemetry.store.writer import RunWriter

logger = logging.getLogger(__name__)


class RecordedRun(Protocol):
    """What the sink reads of the run it records, when it records it."""

    @property
    def run_id(self) -> str: ...

    @property
    def organization_id(self) -> int: ...

    @property
    def organization_name(self) -> str: ...

    @property
    def route(self) -> str: ...

    @property
    def session(self) -> str: ...

    @property
    def keeps_content(self) -> bool: ...


class RunSink:
    """Hands a run's rows, chunks and events on, never blocking."""

    def __init__(self, *, writer: RunWriter, events: EventPublisher | None) -> None:
        self._writer = writer
        self._events = events
        # A chunk goes straight to the writer's queue: no call of the sink's own for each one.
        self.chunk: Callable[[ChunkSent], None] = writer.submit

    def publish(self, run: RecordedRun, event_type: str, **fields: Any) -> None:
        if self._events is not None:
            self._events.publish(
                run.organization_id, event_type, run.run_id, session=run.session, **fields
            )

    def opened(self, run: RecordedRun, fields: RunFields, images: Sequence[ImageRecord]) -> None:
        """The run is about to generate: its row as decided, in progress, before any chunk."""
        self._writer.submit(self._row(run, fields, images, keep_body=False))
        metrics.run_opened()
        self._publish_accepted(run, fields)

    def closed(
        self,
        run: RecordedRun,
        *,
        fields: RunFields,
        outcome: RunFields,
        opened: bool,
        images: Sequence[ImageRecord],
        chunks: Sequence[ChunkSent],
        seconds: float,
        first_token_seconds: float | None,
        replica_name: str | None,
    ) -> None:
        """The run's outcome: written to its opened row, or — a run that never opened — its
        row whole, with its chunks; then its events, metrics and log line. `fields` is every
        field of the run, its outcome included."""
        with step("record"):
            status = outcome.get("status", "")
            if opened:
                self._writer.submit(RunClosed(run.run_id, self._stored(run, outcome)))
            else:
                refused_400 = status == Run.Status.REFUSED and outcome.get("http_status") == 400
                self._writer.submit(self._row(run, fields, images, keep_body=refused_400))
                for row in chunks:
                    self._writer.submit(row)
                self._publish_accepted(run, fields)
            self._publish_outcome(run, fields, replica_name)
            try:
                metrics.run_closed(
                    fields,
                    route=run.route,
                    seconds=seconds,
                    first_token_seconds=first_token_seconds,
                    opened=opened,
                )
            except OSError:  # the metrics files' disk is full: the run is stored all the same
                logger.exception("run %s: its metrics were not recorded", run.run_id)
            request_logged(
                fields,
                route=run.route,
                organization=run.organization_name,
                seconds=seconds,
                first_token_seconds=first_token_seconds,
            )

    def _stored(self, run: RecordedRun, fields: RunFields, *, keep_body: bool = False) -> RunFields:
        if run.keeps_content:
            return fields
        stored = fields.copy()
        if not keep_body:
            stored.pop("request_body", None)
            stored.pop("upstream_request", None)
        stored.pop("reply_text", None)
        return stored

    def _row(
        self,
        run: RecordedRun,
        fields: RunFields,
        images: Sequence[ImageRecord],
        *,
        keep_body: bool,
    ) -> RunOpened:
        """The run's row, with its images where its body is kept (they are part of it: the
        stored body names them)."""
        keeps_images = run.keeps_content or keep_body
        return RunOpened(
            self._stored(run, fields, keep_body=keep_body), tuple(images) if keeps_images else ()
        )

    def _publish_accepted(self, run: RecordedRun, fields: RunFields) -> None:
        self.publish(
            run,
            "request.accepted",
            model=fields.get("model", ""),
            deployment=fields.get("deployment", ""),
            endUser=fields.get("end_user", ""),
            stream=fields.get("stream"),
            # The key's id (never its prefix: that is part of the secret), so the dashboard's
            # live feed can be narrowed to one key.
            keyId=fields.get("api_key_id"),
        )

    def _publish_outcome(self, run: RecordedRun, fields: RunFields, replica: str | None) -> None:
        status = fields.get("status")
        accepted_at, finished_at = fields.get("accepted_at"), fields.get("finished_at")
        latency_ms = _milliseconds(accepted_at, finished_at)
        usage = fields.get("usage")
        source = fields.get("usage_source", "")
        if status == Run.Status.COMPLETED:
            self.publish(
                run,
                "generation.finished",
                finishReason=fields.get("finish_reason", ""),
                usage=usage,
                usageSource=source,
                latencyMs=latency_ms,
            )
        elif status in (Run.Status.STOPPED, Run.Status.CANCELLED):
            self.publish(
                run,
                "generation.stopped",
                reason=fields.get("error_code") or "stopped",
                usage=usage,
                usageSource=source,
                latencyMs=latency_ms,
            )
        else:
            self.publish(
                run,
                "generation.failed",
                httpStatus=fields.get("http_status"),
                code=fields.get("error_code", ""),
                message=fields.get("error_message", ""),
            )
        if usage is None:
            return
        self.publish(
            run,
            "cache",
            promptTokens=fields.get("prompt_tokens"),
            cachedTokens=fields.get("cached_tokens") or 0,
            sessionKept=fields.get("session_kept"),
            replica=replica,
            usageSource=source,
        )
        cost = fields.get("cost")
        self.publish(
            run,
            "cost",
            cost=None if cost is None else str(cost),
            promptTokens=fields.get("prompt_tokens"),
            cachedTokens=fields.get("cached_tokens") or 0,
            completionTokens=fields.get("completion_tokens"),
            usageSource=source,
        )


def _milliseconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000, 1)


def run_sink() -> RunSink:
    """This process's sink: its run writer and event publisher."""
    return RunSink(writer=run_writer(), events=event_publisher())
