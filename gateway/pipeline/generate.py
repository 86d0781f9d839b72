"""Start the generation — scripted, or forwarded to the session's replica — and relay it."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.http import HttpResponse

from accounts.models import Organization
from billing.costs import usage_cost
from billing.services.ratelimits import count_usage
from core.errors import MortarError
from core.http.responses import EventStreamResponse
from gateway.coordination.stop import live_generations
from gateway.generation.forwarding import encode_body, forward, upstream_body
from gateway.generation.reply import Deltas, Generation
from gateway.generation.scripted import ScriptedModel, one_per_batch
from gateway.models import Deployment
from gateway.pipeline.plan import Plan
from gateway.pipeline.record import RunRecord
from gateway.pipeline.surface import RenderingFor
from gateway.relay.json import json_response
from gateway.relay.relay import Relay
from gateway.relay.sse import streaming_response
from gateway.upstream.counting import UsageCounting
from telemetry.models import Run
from telemetry.store.fields import RunOutcome

logger = logging.getLogger(__name__)


async def generate(
    record: RunRecord, organization: Organization
) -> HttpResponse | EventStreamResponse:
    """Generate the planned reply and relay it, as a stream or one JSON body."""
    plan, recorder, run_id = record.plan, record.recorder, record.run_id
    chat, model, deployment, counter = plan.chat, plan.model, plan.deployment, plan.counter
    assert chat is not None and model is not None and deployment is not None
    assert counter is not None and plan.optimizer_report is not None and plan.session is not None
    forwarding = deployment.kind == Deployment.Kind.UPSTREAM
    upstream_request = None
    forwarded_body: dict[str, Any] = {}
    if forwarding:
        forwarded_body = upstream_body(
            chat,
            upstream_model=deployment.upstream_model or model.id,
            max_tokens=plan.max_tokens,
            extra_fields=deployment.extra_fields,
        )
        upstream_request = encode_body(forwarded_body)
    # In the crash log once open, before the model server has the prompt: a worker killed from
    # here on leaves a run (and its budget draw) the next worker stores, and charges.
    record.open(upstream_request=upstream_request)
    recorder.publish("optimizer.report", report=plan.optimizer_report.as_dict())
    live = live_generations()

    def release() -> None:
        live.unregister(run_id)

    generation = Generation()
    deltas: Deltas
    counting: UsageCounting | None = None
    try:
        stop = await live.register(run_id, organization.id)
        if forwarding:
            assert upstream_request is not None
            forwarded = await forward(
                chat,
                deployment=deployment,
                session=plan.session,
                max_tokens=plan.max_tokens,
                body=upstream_request,
                generation=generation,
                counter=counter,
            )
            plan.replica = forwarded.replica_name
            recorder.routed(
                deployment=deployment.name,
                replica=forwarded.replica,
                replica_name=forwarded.replica_name,
                session_kept=forwarded.session_kept,
            )
            deltas = forwarded.deltas
            counting = UsageCounting.for_deployment(deployment, forwarded.replica, forwarded_body)
            ping_interval: float | None = settings.MORTAR_PING_SECONDS
        else:
            recorder.routed(
                deployment=deployment.name, replica="", replica_name="", session_kept=None
            )
            scripted = ScriptedModel(counter=counter, delay_ms=deployment.scripted_delay_ms)
            deltas = one_per_batch(
                scripted.generate(chat, max_tokens=plan.max_tokens, generation=generation)
            )
            ping_interval = None
    except MortarError as error:
        release()
        if generation.prompt_consumed:
            return await record.refused(error, **consumed_prompt(plan, generation))
        return await record.refused(error)
    except Exception:
        # Mortar's own fault, not the client's: recorded as the 500 it is answered with, never
        # as a disconnect.
        logger.exception("The generation of %s failed to start", run_id)
        release()
        return await record.refused(MortarError("Mortar failed to start the generation."))
    except BaseException:
        # The client went away while the model server was being reached.
        record.cancel()
        release()
        raise

    relay = Relay(
        deltas=deltas,
        generation=generation,
        rendering=plan.surface.rendering(
            RenderingFor(
                run_id=run_id,
                created=record.accepted.created,
                model=model.id,
                prompt_tokens=plan.prompt_tokens,
                chat=chat,
                finish_chunk_delta=organization.finish_chunk_delta,
            )
        ),
        record=record,
        headers=plan.headers(),
        ping_interval=ping_interval,
        stop=stop,
        release=release,
        counting=counting,
    )
    if plan.stream:
        return streaming_response(relay)
    return await json_response(relay)


def consumed_prompt(plan: Plan, generation: Generation) -> RunOutcome:
    """What a model server that failed before its first byte consumed: its own usage when it
    reported one, else the prompt alone — at the model's prices, charged like any usage (a
    model server bills the prompt it processed, whether or not a reply came of it)."""
    assert plan.model is not None
    reported = generation.upstream_usage
    if reported is not None and isinstance(reported.get("prompt_tokens"), int):
        usage, source = reported, Run.UsageSource.UPSTREAM
    else:
        usage = {"prompt_tokens": plan.prompt_tokens, "completion_tokens": 0}
        usage["total_tokens"] = plan.prompt_tokens
        source = Run.UsageSource.ESTIMATE
    completion = usage.get("completion_tokens")
    if plan.rate_limits is not None:
        count_usage(plan.rate_limits, plan.prompt_tokens, usage)
    return {
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": completion if isinstance(completion, int) else 0,
        "total_tokens": usage.get("total_tokens") or 0,
        "cost": usage_cost(usage, plan.model.prices),
        "usage": usage,
        "usage_source": source,
    }
