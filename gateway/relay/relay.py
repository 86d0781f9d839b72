"""One generation on its way to the client: what produces it, how it is rendered and recorded,
and how its run is closed — with its usage, the source of that usage, and its cost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from billing.costs import Prices, cached_tokens_of, usage_cost
from billing.services.holds import HeldBudget
from core.flags import Flag
from core.http.envelopes import Envelope
from gateway.generation.reply import Deltas, Generation
from gateway.relay.rendering import Rendering
from telemetry.models import Run
from telemetry.recording import RunRecorder
from telemetry.store.records import RunOutcome
from telemetry.store.search_text import REPLY_TEXT_LIMIT, capped

# A stopped non-streaming reply says so (the spec leaves it open; OpenAI's values don't cover it).
STOPPED_FINISH_REASON = "stopped"


@dataclass
class Relay:
    """One generation on its way out: what produces it, how it is rendered and recorded."""

    # The model's deltas, a list per batch that arrived together (never empty).
    deltas: Deltas
    generation: Generation
    # The bytes of the reply, in the dialect of the surface that asked (chat or Messages).
    rendering: Rendering
    # The envelope of an error, as the surface's route writes it.
    envelope: Envelope
    recorder: RunRecorder
    prompt_tokens: int
    headers: dict[str, str]
    prices: Prices = field(default_factory=Prices)
    # The run's hold on its budgets, charged with its cost when it closes (issue 14).
    budget: HeldBudget | None = None
    # Set when someone presses Stop (gateway/coordination/stop.py); `release` unregisters
    # the generation (idempotent).
    stop: Flag | None = None
    release: Callable[[], None] | None = None
    # Seconds of upstream silence before a ping (spec: every 10 s when the deployment
    # forwards to a model server); None for the scripted model.
    ping_interval: float | None = None
    # Told the usage once, when the run closes (the rate limits count it).
    on_usage: Callable[[dict[str, Any]], None] | None = None

    def usage(self) -> tuple[dict[str, Any], str]:
        """The usage to report and its source: the model server's own counts when it sent
        them (details passed through unchanged), else Mortar's estimate."""
        reported = self.generation.upstream_usage
        if (
            reported is not None
            and not self.generation.cut_by_mortar
            and isinstance(reported.get("prompt_tokens"), int)
            and isinstance(reported.get("completion_tokens"), int)
        ):
            return reported, Run.UsageSource.UPSTREAM
        completion = self.generation.own_completion_tokens()
        estimate = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }
        return estimate, Run.UsageSource.ESTIMATE

    def close_run(
        self, status: str, *, http_status: int, error_code: str = "", error_message: str = ""
    ) -> None:
        """Record the run's end with its usage and what that usage cost."""
        if status == Run.Status.STOPPED and not error_code and self.stop is not None:
            # Stopped by the worker itself (its shutdown grace ran out), not by a person.
            error_code = self.stop.reason
        usage, source = self.usage()
        if self.on_usage is not None:
            on_usage, self.on_usage = self.on_usage, None
            on_usage(usage)
        cost = usage_cost(usage, self.prices)
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
        if self.budget is not None:
            # Charged once (a later close is a no-op), settled on a worker thread.
            outcome["charged_usd"] = self.budget.charge(cost)
        self.recorder.close(status=status, **outcome)

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
