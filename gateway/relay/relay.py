"""One generation on its way to the client: what produces it, how it is rendered and recorded,
and how its run is closed — with its usage, the source of that usage, and its cost."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from billing.costs import cached_tokens_of, usage_cost
from billing.services.ratelimits import count_usage
from core.errors import UpstreamError
from core.flags import Flag
from core.http.envelopes import Envelope
from gateway.generation.reply import Deltas, Generation
from gateway.relay.rendering import Rendering
from gateway.upstream.counting import UsageCounting, count_in_background, usage_counted
from telemetry.models import Run
from telemetry.recording import RunRecorder
from telemetry.store.fields import RunOutcome
from telemetry.store.search_text import REPLY_TEXT_LIMIT, capped

if TYPE_CHECKING:  # the pipeline makes relays; only its record's type is needed here
    from gateway.pipeline.record import RunRecord

logger = logging.getLogger(__name__)

# Runs whose reply reached the client, whole or in part: what the model server processed is
# billed on its count when the deployment has it counted.
COUNTED_STATUSES = (Run.Status.COMPLETED, Run.Status.STOPPED, Run.Status.CANCELLED)

# A stopped non-streaming reply says so (OpenAI's values don't cover a stop).
STOPPED_FINISH_REASON = "stopped"


@dataclass
class Relay:
    """One generation on its way out: what produces it, how it is rendered and recorded."""

    # The model's deltas, a list per batch that arrived together (never empty).
    deltas: Deltas
    generation: Generation
    # The bytes of the reply, in the dialect of the surface that asked (chat or Messages).
    rendering: Rendering
    # The request's run: its plan (prompt, prices, limits), its recorder, and its hold.
    record: RunRecord
    headers: dict[str, str]
    # Set when someone presses Stop (gateway/coordination/stop.py); `release` unregisters
    # the generation (idempotent).
    stop: Flag | None = None
    release: Callable[[], None] | None = None
    # Seconds of upstream silence before a ping (every 10 s when the deployment forwards to a
    # model server); None for the scripted model.
    ping_interval: float | None = None
    # How to have the model server count the reply when it reports no usage (the deployment's
    # `usage_count`); None: Mortar's estimate.
    counting: UsageCounting | None = None
    # The run's close waits for the model server's count (`close_run`).
    counting_usage: bool = False

    @property
    def recorder(self) -> RunRecorder:
        return self.record.recorder

    @property
    def envelope(self) -> Envelope:
        """The envelope of an error, as the surface's route writes it."""
        return self.record.plan.surface.envelope

    def reported_usage(self) -> dict[str, Any] | None:
        """The model server's own counts, when it sent them and they cover the reply."""
        reported = self.generation.upstream_usage
        if (
            reported is not None
            and not self.generation.cut_by_mortar
            and isinstance(reported.get("prompt_tokens"), int)
            and isinstance(reported.get("completion_tokens"), int)
        ):
            return reported
        return None

    def usage(self) -> tuple[dict[str, Any], str]:
        """The usage to report and its source: the model server's own counts when it sent
        them (details passed through unchanged), else Mortar's estimate."""
        reported = self.reported_usage()
        if reported is not None:
            return reported, Run.UsageSource.UPSTREAM
        completion = self.generation.own_completion_tokens()
        prompt = self.record.plan.prompt_tokens
        estimate = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        return estimate, Run.UsageSource.ESTIMATE

    def close_run(
        self, status: str, *, http_status: int, error_code: str = "", error_message: str = ""
    ) -> None:
        """Close the run with its usage and what that usage cost (its hold charged with it),
        and count the usage against the request's rate limits; only the first close counts.

        A reply the model server reported no usage for, on a deployment that has it counted,
        is closed once the count is in: after the response, in the background.
        """
        if self.recorder.closed or self.counting_usage:
            return
        if status == Run.Status.STOPPED and not error_code and self.stop is not None:
            # Stopped by the worker itself (its shutdown grace ran out), not by a person.
            error_code = self.stop.reason
        if (
            self.counting is not None
            and status in COUNTED_STATUSES
            and self.reported_usage() is None
        ):
            self.counting_usage = True
            count_in_background(
                self._close_counted(
                    self.counting,
                    status,
                    http_status=http_status,
                    error_code=error_code,
                    error_message=error_message,
                )
            )
            return
        self._close(status, *self.usage(), http_status, error_code, error_message)

    async def _close_counted(
        self,
        counting: UsageCounting,
        status: str,
        *,
        http_status: int,
        error_code: str,
        error_message: str,
    ) -> None:
        """Close the run with the model server's count of the reply, or Mortar's estimate when
        the model server cannot give one."""
        try:
            counted = await usage_counted(counting, self.generation.text())
        except UpstreamError as exc:
            logger.warning("run %s: usage not counted upstream: %s", self.recorder.run_id, exc)
            usage, source = self.usage()
        except Exception:  # the run is closed whatever went wrong: never left in progress
            logger.exception("run %s: counting its usage upstream failed", self.recorder.run_id)
            usage, source = self.usage()
        else:
            usage, source = counted.usage(), Run.UsageSource.UPSTREAM_COUNT
        self._close(status, usage, source, http_status, error_code, error_message)

    def _close(
        self,
        status: str,
        usage: dict[str, Any],
        source: str,
        http_status: int,
        error_code: str,
        error_message: str,
    ) -> None:
        plan = self.record.plan
        if plan.rate_limits is not None:
            count_usage(plan.rate_limits, plan.prompt_tokens, usage)
        assert plan.model is not None
        cost = usage_cost(usage, plan.model.prices)
        outcome: RunOutcome = {
            "http_status": http_status,
            "error_code": error_code,
            "error_message": error_message,
            "finish_reason": self.generation.finish_reason
            if status in (Run.Status.COMPLETED, Run.Status.STOPPED)
            else "",
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
            "total_tokens": usage.get("total_tokens", 0),
            "cached_tokens": cached_tokens_of(usage),
            "cost": cost,
            "usage": usage,
            "usage_source": source,
            # Handed over as it is (a reference); the writer stores it, the search reads it.
            "reply_text": capped(self.generation.searchable_text(), REPLY_TEXT_LIMIT),
        }
        self.record.close(status, **outcome)

    def end(self) -> None:
        """The generation is over: a stop for it is a 404 from now on."""
        if self.release is not None:
            self.release()


def abandon(relay: Relay) -> None:
    """Close a run whose stream was never read to its end (the client left early).

    A no-op for a run that ended: only a run's first close counts, and release is idempotent.
    """
    relay.close_run(Run.Status.CANCELLED, http_status=200, error_code="client_disconnected")
    relay.end()
