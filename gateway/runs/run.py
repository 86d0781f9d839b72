"""A request's run in flight: every fact of it from acceptance to close, and its one close.

What the pipeline decided is the last stage the run reached (`stages.py`); what it sent is
every chunk, each recorded as it goes out; how it ended is the `Outcome` its close takes. The
close works out, once, what follows from the outcome — the usage's columns, the cost at the
model's prices, the tokens counted against the rate limits and the charge on the budget hold —
and records the run through its sink (`telemetry.recording.RunSink`), which keeps nothing of
it. Only the first close counts, so whichever way a request ends (a reply, a stop, a failure,
a refusal, the client gone) its run is closed and its hold charged exactly once: the cost, or
nothing when it has none. The budget's SQL then enforces what the close decided.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from django.http import HttpResponse

from billing.costs import cached_tokens_of, usage_cost
from billing.services.ratelimits import count_usage
from core.errors import MortarError
from core.http.responses import error_response
from gateway.runs.stages import (
    Accepted,
    Admitted,
    Held,
    Limited,
    Planned,
    Resolved,
    Routed,
    Stage,
)
from telemetry.models import Run
from telemetry.recording import RunSink
from telemetry.store.fields import ImageRecord, RunFields
from telemetry.store.items import ChunkSent

S = TypeVar("S", Accepted, Resolved, Planned, Limited, Held, Admitted, Routed)

# A run whose reply was cut short still reports why the model stopped, as far as it got.
_FINISHED = (Run.Status.COMPLETED, Run.Status.STOPPED)


@dataclass(frozen=True, slots=True)
class Usage:
    """A run's token counts, in OpenAI's shape as runs keep them, and where they came from."""

    counts: dict[str, Any]
    source: str  # `Run.UsageSource`

    @classmethod
    def estimate(cls, prompt_tokens: int, completion_tokens: int) -> Usage:
        """Mortar's own count: the planned prompt and the reply as its counter counts it."""
        counts = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        return cls(counts, Run.UsageSource.ESTIMATE)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended, as whatever ended it saw it: its status, what was answered, the
    usage behind it (None when no model server had its prompt) and the reply's text."""

    status: str  # `Run.Status`
    http_status: int
    finish_reason: str = ""
    error_code: str = ""
    error_message: str = ""
    usage: Usage | None = None
    reply_text: str = ""


@dataclass(frozen=True, slots=True)
class Closed:
    """What a run's close worked out from its outcome."""

    outcome: Outcome
    cost: Decimal | None  # the usage at the model's prices; None without usage
    charged_usd: Decimal | None  # its hold's charge; None without a hold
    rate_limit_tokens: int  # counted against its tokens limits as the run ended


class RunInFlight:
    """One request's run, from acceptance until its close."""

    __slots__ = (
        "_held_chunks",
        "_opened_fields",
        "_seq",
        "_sink",
        "_stages",
        "_started",
        "accepted",
        "closed",
        "closing",
        "first_token_at",
        "keeps_content",
        "organization_id",
        "organization_name",
        "reached",
        "route",
        "run_id",
        "session",
    )

    def __init__(self, accepted: Accepted, sink: RunSink) -> None:
        self.accepted = accepted
        self.reached: Stage = accepted
        # The stages reached, in order, by kind: what a step decided is found without walking
        # the chain.
        self._stages: dict[type[Stage], Stage] = {Accepted: accepted}
        self._sink = sink
        self._started = accepted.started
        # What the sink reads of it, fixed at acceptance; `session` once it is resolved.
        self.run_id = accepted.run_id
        self.keeps_content = accepted.keeps_content
        self.organization_id = accepted.organization.id
        self.organization_name = accepted.organization.name
        self.route = accepted.route
        self.session = ""
        # Chunks sent before the run's row is queued (a refusal's body): written after it.
        self._held_chunks: list[ChunkSent] = []
        self._seq = 0
        self._opened_fields: RunFields | None = None
        self.closing = False  # its close has begun (it may wait for the usage to be counted)
        self.closed: Closed | None = None
        self.first_token_at: datetime | None = None

    # -- what was decided -----------------------------------------------------------------

    def reach(self, stage: S) -> S:
        """The pipeline decided `stage` (which holds the stage reached so far)."""
        self.reached = stage
        self._stages[type(stage)] = stage
        if type(stage) is Resolved:
            self.session = stage.session
        return stage

    def stage(self, kind: type[S]) -> S | None:
        """The stage of this kind the run reached, if it got that far."""
        return self._stages.get(kind)  # type: ignore[return-value]  # filed by its kind

    def fields(self) -> RunFields:
        """The run's columns as its stages decided them, as far as it got."""
        fields: RunFields = {}
        for stage in self._stages.values():
            stage.add_fields(fields)
        return fields

    def headers(self) -> dict[str, str]:
        """The response's `X-Mortar-*` headers, and `x-ratelimit-*` for a request with rate
        limits, from what was decided."""
        headers: dict[str, str] = {}
        for stage in self._stages.values():
            stage.add_headers(headers)
        return headers

    # -- what happens ---------------------------------------------------------------------

    def open(self, admitted: Admitted, *, upstream_request: bytes | None) -> None:
        """The run, admitted, is about to generate: write it as decided, in progress, with what
        is sent."""
        held = admitted.held
        self.reach(admitted)
        fields = self.fields()
        fields["status"] = Run.Status.IN_PROGRESS
        fields["stream"] = held.planned.stream
        fields["max_tokens"] = held.max_tokens
        fields["upstream_request"] = upstream_request
        self._opened_fields = fields
        self._sink.opened(self, fields, held.planned.image_records())
        for row in self._held_chunks:
            self._sink.chunk(row)
        self._held_chunks.clear()

    def route_to(self, routed: Routed) -> None:
        """The replica that answers: its name (never its URL) in the events clients read."""
        self.reach(routed)
        self.publish(
            "request.routed",
            deployment=routed.prior.held.planned.resolved.deployment.name,
            replica=routed.replica_name or None,
            sessionKept=routed.session_kept,
        )

    def publish(self, event_type: str, **fields: Any) -> None:
        self._sink.publish(self, event_type, **fields)

    def chunk(self, data: bytes) -> None:
        """One chunk, exactly as it was sent, at its time since acceptance."""
        if self.keeps_content:
            offset_us = int((time.perf_counter() - self._started) * 1_000_000)
            row = ChunkSent(self.run_id, self._seq, offset_us, data)
            if self._opened_fields is not None:
                self._sink.chunk(row)
            else:  # its run row isn't queued yet: chunks must not reach the writer first
                self._held_chunks.append(row)
        self._seq += 1

    def first_token(self) -> None:
        if self.first_token_at is None:
            accepted_at = self.accepted.accepted_at
            self.first_token_at = accepted_at + timedelta(microseconds=self._elapsed_us())
            ttft = self.first_token_at - accepted_at
            self.publish("generation.first_token", ttftMs=round(ttft.total_seconds() * 1000, 1))

    def _elapsed_us(self) -> int:
        return int((time.perf_counter() - self._started) * 1_000_000)

    # -- how it ends ------------------------------------------------------------------------

    def refuse(self, error: MortarError, *, usage: Usage | None = None) -> HttpResponse:
        """Answer with the surface's error envelope, and close the run with it (with the
        usage a model server consumed before failing, when it had the prompt)."""
        response = error_response(error, self.headers(), envelope=self.accepted.surface.envelope)
        self.chunk(response.content)
        self.close(
            Outcome(
                status=Run.Status.REFUSED if error.status < 500 else Run.Status.FAILED,
                http_status=error.status,
                error_code=error.code,
                error_message=error.message,
                usage=usage,
            )
        )
        return response

    async def refused(self, error: MortarError, *, usage: Usage | None = None) -> HttpResponse:
        """`refuse`, answered once its hold is settled."""
        response = self.refuse(error, usage=usage)
        await self.settled()
        return response

    def cancel(self) -> None:
        """The client went away before a reply was sent."""
        self.close(Outcome(Run.Status.CANCELLED, http_status=499, error_code="client_disconnected"))

    def close(self, outcome: Outcome) -> None:
        """Close the run with its outcome; only the first close counts."""
        if not self.closing:
            self.closing = True
            self._close(outcome)

    def close_when(
        self, outcome: Outcome, usage: Awaitable[Usage]
    ) -> Coroutine[Any, Any, None] | None:
        """Close the run with `outcome` and the usage `usage` gives once it is known: the close
        begins now (no other close counts from here), and the coroutine returned, run in the
        background, ends it. None when the run's close had begun already."""
        if self.closing:
            return None
        self.closing = True
        return self._close_with(outcome, usage)

    async def _close_with(self, outcome: Outcome, usage: Awaitable[Usage]) -> None:
        self._close(replace(outcome, usage=await usage))

    async def settled(self) -> None:
        """Wait for the run's charge to be settled on its budgets (nothing to wait for without
        a hold): the response's last bytes go after it."""
        held = self.stage(Held)
        if held is not None and held.budget is not None:
            await held.budget.settled()

    def _close(self, outcome: Outcome) -> None:
        closed = self.closed = self._money(outcome)
        elapsed_us = self._elapsed_us()
        accepted_at = self.accepted.accepted_at
        finished: RunFields = {
            "status": outcome.status,
            "http_status": outcome.http_status,
            "error_code": outcome.error_code,
            "error_message": outcome.error_message,
            "finished_at": accepted_at + timedelta(microseconds=elapsed_us),
            "first_token_at": self.first_token_at,
            "chunk_count": self._seq,
        }
        if outcome.status in _FINISHED:
            finished["finish_reason"] = outcome.finish_reason
        if outcome.reply_text:
            # Handed over as it is (a reference); the writer stores it, the search reads it.
            finished["reply_text"] = outcome.reply_text
        usage = outcome.usage
        if usage is not None:
            counts = usage.counts
            completion = counts.get("completion_tokens")
            finished["prompt_tokens"] = counts["prompt_tokens"]
            finished["completion_tokens"] = completion if isinstance(completion, int) else 0
            finished["total_tokens"] = counts.get("total_tokens") or 0
            finished["cached_tokens"] = cached_tokens_of(counts)
            finished["usage"] = counts
            finished["usage_source"] = usage.source
        if closed.cost is not None:
            finished["cost"] = closed.cost
        if closed.charged_usd is not None:
            finished["charged_usd"] = closed.charged_usd
        routed = self.stage(Routed)
        if routed is not None:
            routed.add_fields(finished)
        opened = self._opened_fields
        fields = self.fields() if opened is None else opened
        first_token = self.first_token_at
        self._sink.closed(
            self,
            fields={**fields, **finished},
            outcome=finished,
            opened=opened is not None,
            images=() if opened is not None else self._images(),
            chunks=self._held_chunks,
            seconds=elapsed_us / 1_000_000,
            first_token_seconds=None
            if first_token is None
            else (first_token - accepted_at).total_seconds(),
            replica_name=None if routed is None else routed.replica_name or None,
        )
        self._held_chunks = []

    def _images(self) -> list[ImageRecord]:
        planned = self.stage(Planned)
        return [] if planned is None else planned.image_records()

    def _money(self, outcome: Outcome) -> Closed:
        """The run's cost, its hold's charge and the tokens its rate limits count, once."""
        usage = outcome.usage
        admitted = self.stage(Admitted)
        cost: Decimal | None = None
        counted = 0
        if admitted is not None and admitted.dedupe_role == "shared":
            cost = Decimal(0)  # the leader's run is charged for the generation, and counted
        elif usage is not None and (planned := self.stage(Planned)) is not None:
            # Usage comes from a model server, so the run was planned: its model has prices.
            cost = usage_cost(usage.counts, planned.resolved.model.prices)
            limited = self.stage(Limited)
            if limited is not None and limited.rate_limits is not None:
                counted = count_usage(limited.rate_limits, planned.prompt_tokens, usage.counts)
        held = self.stage(Held)
        charged = None
        if held is not None and held.budget is not None:
            charged = held.budget.charge(Decimal(0) if cost is None else cost)
        return Closed(outcome, cost, charged, counted)
