"""The completion pipeline, in the order a request goes through it.

    authenticate (the operation's auth) → accept → read body → validate → resolve model (one
    the key may use) and session → images (a model with vision) → tool selector → prompt
    optimizer → count tokens → output cap → rate limits → hold on the budgets → dedupe →
    generate (scripted, or forward to the session's replica) → relay chunks → close the run

One pipeline for every API surface (`gateway.surfaces`): a surface's route calls `complete`
with its `Surface` — how its body becomes the chat request every step works with, the run id's
prefix, its error envelope, how its reply is rendered — and the pipeline knows no surface.

Each step is a small function with one job (`accept`, `plan`, `admission`, `generate`,
`share`); this module only puts them in order. Each step's decision is a stage of the request's
run (`gateway.runs`), which the run reaches one after another; the run is recorded from the
stages it reached, so a refused request (4xx) is a run of the key's organization too, with the
body as received and the error body as sent. However a request ends, its run's one close works
out its usage, cost, rate-limit count and budget charge. Only a request without a valid key is
not a run: it has no organization to belong to (the operation's auth refuses it first).
"""

from __future__ import annotations

import logging

from django.http import HttpResponse

from accounts.models import ApiKey
from core.errors import MortarError
from core.http.requests import ApiRequest
from core.http.responses import EventStreamResponse
from core.tracing import annotate, step
from gateway.contract.chat import ChatRequest
from gateway.contract.headers import read_mortar_headers
from gateway.contract.surface import Surface
from gateway.coordination.dedupe import in_flight_board
from gateway.pipeline.accept import accept, body_within_limit
from gateway.pipeline.admission import budget_hold, limits_take
from gateway.pipeline.generate import generate
from gateway.pipeline.plan import model_for, plan, prompt_plan, resolve
from gateway.pipeline.share import share
from gateway.runs.run import RunInFlight
from gateway.runs.stages import Admitted
from telemetry.recording import run_sink

logger = logging.getLogger(__name__)


async def complete(
    request: ApiRequest, key: ApiKey, surface: Surface, *, rerun_of: str | None = None
) -> HttpResponse | EventStreamResponse:
    """Answer `request`, authenticated as `key`, on `surface`: a route's request, a re-run
    (`rerun_of` names the run it sends again) or the dashboard's playground, run in-process."""
    run = RunInFlight(accept(request, key, surface, rerun_of=rerun_of), run_sink())
    annotate(run_id=run.run_id, organization=run.organization_name)
    try:
        body = body_within_limit(run.accepted)
        resolved = run.reach(await resolve(run.accepted, request, body))
        planned = run.reach(await plan(resolved, request))
        limited = run.reach(await limits_take(planned, request))
        if (refusal := limited.refusal()) is not None:
            raise refusal
        held = run.reach(await budget_hold(limited))
        claim = None
        if limited.dedupe is not None:
            with step("dedupe"):
                claim = await in_flight_board().claim(
                    run.organization_id, limited.dedupe, run.run_id
                )
    except MortarError as error:
        return await run.refused(error)
    except Exception:
        # Mortar's own fault: answered and recorded as the 500 it is.
        logger.exception("The request of %s failed before generating", run.run_id)
        return await run.refused(MortarError("Mortar failed to handle the request."))
    except BaseException:
        run.cancel()  # the client went away (its hold, if one was taken, is released)
        raise

    if claim is None:
        return await generate(run, Admitted(held))
    if claim.role == "shared":
        return await share(run, held, claim)
    try:
        response = await generate(run, Admitted(held, dedupe_role="leader"))
    except BaseException:
        await claim.abandon(surface.envelope)
        raise
    if isinstance(response, HttpResponse):
        await claim.answer(response)
    else:  # a stream is never deduplicated (`read_dedupe_request`): there is nothing to share
        await claim.abandon(surface.envelope)
    return response


async def prompt_token_count(
    request: ApiRequest, key: ApiKey, surface: Surface, chat: ChatRequest
) -> int:
    """The prompt tokens `surface`'s route would bill for `chat` with these headers — the same
    model, tool selector, optimizer and counter — and no run (nothing is generated)."""
    mortar_headers = read_mortar_headers(request)
    model, deployment = await model_for(chat, key)
    surface.admit(model, chat)
    prompt = await prompt_plan(
        chat, mortar_headers, key.organization, deployment, body_bytes=request.body_size
    )
    return prompt.prompt_tokens
