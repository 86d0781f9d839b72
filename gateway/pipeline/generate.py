"""Start the generation — scripted, or forwarded to the session's replica — and relay it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpResponse

from core.errors import MortarError
from core.http.responses import EventStreamResponse
from gateway.contract.surface import RenderingFor
from gateway.coordination.stop import live_generations
from gateway.generation.forwarding import encode_body, forward, upstream_body
from gateway.generation.reply import Deltas, Generation
from gateway.generation.scripted import ScriptedModel, one_per_batch
from gateway.models import Deployment
from gateway.relay.event_stream import streaming_response
from gateway.relay.json import json_response
from gateway.relay.relay import Relay, consumed_usage
from gateway.runs.run import RunInFlight
from gateway.runs.stages import Admitted, Routed
from gateway.upstream.counting import UsageCounting

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """What is forwarded to a model server: the body, and its bytes as sent and stored."""

    body: dict[str, Any]
    encoded: bytes


async def generate(run: RunInFlight, admitted: Admitted) -> HttpResponse | EventStreamResponse:
    """Generate the planned reply and relay it, as a stream or one JSON body."""
    held = admitted.held
    planned = held.planned
    resolved = planned.resolved
    accepted = resolved.prior
    chat, model, deployment = resolved.chat, resolved.model, resolved.deployment
    sent: UpstreamRequest | None = None
    if deployment.kind == Deployment.Kind.UPSTREAM:
        body = upstream_body(
            chat,
            upstream_model=deployment.upstream_model or model.id,
            max_tokens=held.max_tokens,
            extra_fields=deployment.extra_fields,
        )
        sent = UpstreamRequest(body, encode_body(body))
    # In the crash log once open, before the model server has the prompt: a worker killed from
    # here on leaves a run (and its budget draw) the next worker stores, and charges.
    run.open(admitted, upstream_request=None if sent is None else sent.encoded)
    run.publish("optimizer.report", report=planned.optimizer_report.as_dict())
    live = live_generations()

    def release() -> None:
        live.unregister(accepted.run_id)

    generation = Generation()
    deltas: Deltas
    counting: UsageCounting | None = None
    try:
        stop = await live.register(accepted.run_id, accepted.organization.id)
        if sent is not None:
            forwarded = await forward(
                chat,
                deployment=deployment,
                session=resolved.session,
                max_tokens=held.max_tokens,
                body=sent.encoded,
                generation=generation,
                counter=planned.counter,
            )
            run.route_to(
                Routed(
                    admitted,
                    replica=forwarded.replica,
                    replica_name=forwarded.replica_name,
                    session_kept=forwarded.session_kept,
                )
            )
            deltas = forwarded.deltas
            counting = UsageCounting.for_deployment(deployment, forwarded.replica, sent.body)
            ping_interval: float | None = settings.MORTAR_PING_SECONDS
        else:
            run.route_to(Routed(admitted, replica="", replica_name="", session_kept=None))
            scripted = ScriptedModel(counter=planned.counter, delay_ms=deployment.scripted_delay_ms)
            deltas = one_per_batch(
                scripted.generate(chat, max_tokens=held.max_tokens, generation=generation)
            )
            ping_interval = None
    except MortarError as error:
        release()
        # A model server that failed before its first byte may have processed the prompt.
        usage = consumed_usage(generation, planned.prompt_tokens)
        return await run.refused(error, usage=usage)
    except Exception:
        # Mortar's own fault, not the client's: recorded as the 500 it is answered with, never
        # as a disconnect.
        logger.exception("The generation of %s failed to start", accepted.run_id)
        release()
        return await run.refused(MortarError("Mortar failed to start the generation."))
    except BaseException:
        # The client went away while the model server was being reached.
        run.cancel()
        release()
        raise

    relay = Relay(
        deltas=deltas,
        generation=generation,
        rendering=accepted.surface.rendering(
            RenderingFor(
                run_id=accepted.run_id,
                created=accepted.created,
                model=model.id,
                prompt_tokens=planned.prompt_tokens,
                chat=chat,
                finish_chunk_delta=accepted.organization.finish_chunk_delta,
            )
        ),
        run=run,
        prompt_tokens=planned.prompt_tokens,
        headers=run.headers(),
        ping_interval=ping_interval,
        stop=stop,
        release=release,
        counting=counting,
    )
    if planned.stream:
        return streaming_response(relay)
    return await json_response(relay)
