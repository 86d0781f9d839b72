"""One generation on its way to the client: what produces it, how it is rendered and recorded,
and the outcome its run is closed with — the usage behind the reply and where it came from."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.flags import Flag
from core.http.envelopes import Envelope
from gateway.contract.surface import Rendering
from gateway.errors import UpstreamError
from gateway.generation.reply import Deltas, Generation
from gateway.runs.run import Outcome, RunInFlight, Usage
from gateway.upstream.counting import UsageCounting, count_in_background, usage_counted
from telemetry.models import Run
from telemetry.store.search_text import REPLY_TEXT_LIMIT, capped

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
    # The request's run: every chunk sent is recorded on it, and it is closed once.
    run: RunInFlight
    # The prompt's tokens as Mortar counted them: the estimate's, when no model server counts.
    prompt_tokens: int
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

    @property
    def envelope(self) -> Envelope:
        """The envelope of an error, as the surface's route writes it."""
        return self.run.accepted.surface.envelope

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

    def usage(self) -> Usage:
        """The usage behind the reply: the model server's own counts when it sent them
        (details passed through unchanged), else Mortar's estimate."""
        reported = self.reported_usage()
        if reported is not None:
            return Usage(reported, Run.UsageSource.UPSTREAM)
        return Usage.estimate(self.prompt_tokens, self.generation.own_completion_tokens())

    def close_run(
        self,
        status: str,
        *,
        http_status: int,
        error_code: str = "",
        error_message: str = "",
        usage: Usage | None = None,
    ) -> None:
        """Close the run with the reply's outcome and usage — `usage` when the reply was
        rendered with it, else `usage()` — (only its first close counts).

        A reply the model server reported no usage for, on a deployment that has it counted,
        is closed once the count is in: after the response, in the background.
        """
        run = self.run
        if run.closing:
            return
        if status == Run.Status.STOPPED and not error_code and self.stop is not None:
            # Stopped by the worker itself (its shutdown grace ran out), not by a person.
            error_code = self.stop.reason
        # The model server counts what the client got of a reply it reported no usage for.
        counting = (
            self.counting if status in COUNTED_STATUSES and self.reported_usage() is None else None
        )
        outcome = Outcome(
            status,
            http_status=http_status,
            finish_reason=self.generation.finish_reason,
            error_code=error_code,
            error_message=error_message,
            usage=None if counting is not None else usage or self.usage(),
            reply_text=capped(self.generation.searchable_text(), REPLY_TEXT_LIMIT),
        )
        if counting is not None:
            closing = run.close_when(outcome, self._counted_usage(counting))
            if closing is not None:
                count_in_background(closing)
            return
        run.close(outcome)

    async def _counted_usage(self, counting: UsageCounting) -> Usage:
        """The model server's count of the reply, or Mortar's estimate when the model server
        cannot give one."""
        try:
            counted = await usage_counted(counting, self.generation.text())
        except UpstreamError as exc:
            logger.warning("run %s: usage not counted upstream: %s", self.run.run_id, exc)
            return self.usage()
        except Exception:  # the run is closed whatever went wrong: never left in progress
            logger.exception("run %s: counting its usage upstream failed", self.run.run_id)
            return self.usage()
        return Usage(counted.usage(), Run.UsageSource.UPSTREAM_COUNT)

    def end(self) -> None:
        """The generation is over: a stop for it is a 404 from now on."""
        if self.release is not None:
            self.release()


def consumed_usage(generation: Generation, prompt_tokens: int) -> Usage | None:
    """What a model server that failed before its first byte consumed, when it had the prompt:
    its own usage when it reported one, else the prompt alone — billed like any usage (a model
    server bills the prompt it processed, whether or not a reply came of it)."""
    if not generation.prompt_consumed:
        return None
    reported = generation.upstream_usage
    if reported is not None and isinstance(reported.get("prompt_tokens"), int):
        return Usage(reported, Run.UsageSource.UPSTREAM)
    return Usage.estimate(prompt_tokens, 0)


def abandon(relay: Relay) -> None:
    """Close a run whose stream was never read to its end (the client left early).

    A no-op for a run that ended: only a run's first close counts, and release is idempotent.
    """
    relay.close_run(Run.Status.CANCELLED, http_status=200, error_code="client_disconnected")
    relay.end()
