"""Record one run as it happens: its row, every chunk exactly as it was sent, and live events.

Nothing here waits on the database or Redis: rows go to the run writer's queue, events to the
event publisher's queue. Under an organization's `metadata` retention no prompt or reply text
is kept (no request body, no chunks), except the body of a request refused with 400, kept for
debugging until the retention purge removes it after 7 days.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Unpack

from core.tracing import step
from telemetry import metrics
from telemetry.events import EventPublisher
from telemetry.models import Run
from telemetry.request_log import request_logged
from telemetry.store.fields import ImageRecord, RunFields, RunOutcome
from telemetry.store.items import ChunkSent, RunClosed, RunOpened
from telemetry.store.writer import RunWriter

logger = logging.getLogger(__name__)


class Decided(NamedTuple):
    """A run as its request's code decided it: its fields, and the images its request carried
    (stored with its body, once each by content)."""

    fields: RunFields
    images: Sequence[ImageRecord] = ()


class RunRecorder:
    """Hands a run's row, chunks and events on as they happen, never blocking.

    The run is written as it was decided when it opens (`open`), or with its outcome when it
    closes without having opened (a refusal: `close(decided=…)`); what happens to it after it
    opens is its routing (`routed`), its chunks and its outcome.
    """

    def __init__(
        self,
        *,
        run_id: str,
        accepted_at: datetime,
        organization_id: int,
        writer: RunWriter,
        events: EventPublisher | None,
        keep_content: bool = True,
        worker: str = "",
        route: str = "",
        organization: str = "",
    ):
        self.run_id = run_id
        # The API route and the organization's name: labels of the run's metrics and log line.
        self.route = route
        self.organization = organization
        self.accepted_at = accepted_at
        self.organization_id = organization_id
        self.keep_content = keep_content
        self._started = time.perf_counter()
        self._writer = writer
        self._events = events
        self._fields: RunFields = {
            "id": run_id,
            "accepted_at": accepted_at,
            "organization_id": organization_id,
            # The lease of the worker serving it: closed as interrupted if that lease expires.
            "worker": worker,
        }
        # Where it went (`routed`): written with its outcome.
        self._routing: RunFields = {}
        self._images: tuple[ImageRecord, ...] = ()
        self._early_chunks: list[ChunkSent] = []
        self._opened = False
        self._closed = False
        self._seq = 0
        self._replica_name: str | None = None
        self.first_token_at: datetime | None = None

    # -- events ------------------------------------------------------------------------

    def publish(self, event_type: str, **fields: Any) -> None:
        if self._events is not None:
            self._events.publish(
                self.organization_id,
                event_type,
                self.run_id,
                session=self._fields.get("session", ""),
                **fields,
            )

    def _elapsed_us(self) -> int:
        return int((time.perf_counter() - self._started) * 1_000_000)

    def _now(self) -> tuple[int, datetime]:
        elapsed_us = self._elapsed_us()
        return elapsed_us, self.accepted_at + timedelta(microseconds=elapsed_us)

    def _publish_accepted(self) -> None:
        self.publish(
            "request.accepted",
            model=self._fields.get("model", ""),
            deployment=self._fields.get("deployment", ""),
            endUser=self._fields.get("end_user", ""),
            stream=self._fields.get("stream"),
            # The key's id (never its prefix: that is part of the secret), so the dashboard's
            # live feed can be narrowed to one key.
            keyId=self._fields.get("api_key_id"),
        )

    def _stored(self, fields: RunFields, *, keep_body: bool = False) -> RunFields:
        stored = fields.copy()
        if not (self.keep_content or keep_body):
            stored.pop("request_body", None)
            stored.pop("upstream_request", None)
        if not self.keep_content:
            stored.pop("reply_text", None)
        return stored

    def _opened_row(self, *, keep_body: bool = False) -> RunOpened:
        """The run's row as opened, with its images where its body is kept (they are part of
        it: the stored body names them)."""
        keeps_images = self.keep_content or keep_body
        return RunOpened(
            self._stored(self._fields, keep_body=keep_body),
            self._images if keeps_images else (),
        )

    # -- the run's life ------------------------------------------------------------------

    def open(self, decided: Decided) -> None:
        """Write the run as decided, in progress, before its first chunk."""
        self._fields.update(decided.fields)
        self._images = tuple(decided.images)
        self._fields["status"] = Run.Status.IN_PROGRESS
        self._writer.submit(self._opened_row())
        self._opened = True
        metrics.run_opened()
        for row in self._early_chunks:
            self._writer.submit(row)
        self._early_chunks.clear()
        self._publish_accepted()

    def routed(
        self, *, deployment: str, replica: str, replica_name: str, session_kept: bool | None
    ) -> None:
        """The replica that answers: its URL stored for operators, its name (never the URL)
        in the events API clients read."""
        self._routing["replica"] = replica
        self._routing["session_kept"] = session_kept
        self._replica_name = replica_name or None
        self.publish(
            "request.routed",
            deployment=deployment,
            replica=self._replica_name,
            sessionKept=session_kept,
        )

    def chunk(self, data: bytes) -> None:
        offset_us = self._elapsed_us()
        if self.keep_content:
            row = ChunkSent(self.run_id, self._seq, offset_us, data)
            if self._opened:
                self._writer.submit(row)
            else:  # its run row isn't queued yet: chunks must not reach the writer first
                self._early_chunks.append(row)
        self._seq += 1

    def mark_first_token(self) -> None:
        if self.first_token_at is None:
            _, self.first_token_at = self._now()
            ttft = self.first_token_at - self.accepted_at
            self.publish("generation.first_token", ttftMs=round(ttft.total_seconds() * 1000, 1))

    @property
    def closed(self) -> bool:
        return self._closed

    def close(
        self, *, status: str, decided: Decided | None = None, **fields: Unpack[RunOutcome]
    ) -> None:
        """Write the run's outcome, publish it and count it; only the first close counts.

        A run closed without having opened is written whole here, as `decided` and closed."""
        if self._closed:
            return
        self._closed = True
        if not self._opened and decided is not None:
            self._fields.update(decided.fields)
            self._images = tuple(decided.images)
        with step("record"):
            self._close(status, fields)

    def _close(self, status: str, fields: RunOutcome) -> None:
        elapsed_us, finished_at = self._now()
        outcome: RunFields = {
            **self._routing,
            **fields,
            "status": status,
            "finished_at": finished_at,
            "first_token_at": self.first_token_at,
            "chunk_count": self._seq,
        }
        opened = self._opened
        if opened:
            self._writer.submit(RunClosed(self.run_id, self._stored(outcome)))
        else:
            self._fields.update(outcome)
            refused_400 = status == Run.Status.REFUSED and fields.get("http_status") == 400
            self._writer.submit(self._opened_row(keep_body=refused_400))
            for row in self._early_chunks:
                self._writer.submit(row)
            self._early_chunks.clear()
            self._publish_accepted()
        run: RunFields = {**self._fields, **outcome}
        self._publish_outcome(status, run, finished_at)
        # The one place a request's metrics and log line are recorded.
        seconds = elapsed_us / 1_000_000
        first_token = (
            None
            if self.first_token_at is None
            else (self.first_token_at - self.accepted_at).total_seconds()
        )
        try:
            metrics.run_closed(
                run,
                route=self.route,
                seconds=seconds,
                first_token_seconds=first_token,
                opened=opened,
            )
        except OSError:  # the metrics files' disk is full: the run is stored all the same
            logger.exception("run %s: its metrics were not recorded", self.run_id)
        request_logged(
            run,
            route=self.route,
            organization=self.organization,
            seconds=seconds,
            first_token_seconds=first_token,
        )

    def _publish_outcome(self, status: str, run: RunFields, finished_at: datetime) -> None:
        latency_ms = round((finished_at - self.accepted_at).total_seconds() * 1000, 1)
        usage = run.get("usage")
        source = run.get("usage_source", "")
        if status == Run.Status.COMPLETED:
            self.publish(
                "generation.finished",
                finishReason=run.get("finish_reason", ""),
                usage=usage,
                usageSource=source,
                latencyMs=latency_ms,
            )
        elif status in (Run.Status.STOPPED, Run.Status.CANCELLED):
            self.publish(
                "generation.stopped",
                reason=run.get("error_code") or "stopped",
                usage=usage,
                usageSource=source,
                latencyMs=latency_ms,
            )
        else:
            self.publish(
                "generation.failed",
                httpStatus=run.get("http_status"),
                code=run.get("error_code", ""),
                message=run.get("error_message", ""),
            )
        if usage is None:
            return
        self.publish(
            "cache",
            promptTokens=run.get("prompt_tokens"),
            cachedTokens=run.get("cached_tokens") or 0,
            sessionKept=run.get("session_kept"),
            replica=self._replica_name,
            usageSource=source,
        )
        cost = run.get("cost")
        self.publish(
            "cost",
            cost=None if cost is None else str(cost),
            promptTokens=run.get("prompt_tokens"),
            cachedTokens=run.get("cached_tokens") or 0,
            completionTokens=run.get("completion_tokens"),
            usageSource=source,
        )
