"""The completion pipeline, in the order a request goes through it.

    authenticate (the operation's auth) → accept → read body → validate → resolve model (one
    the key may use) → images (a model with vision) → session → tool selector →
    prompt optimizer → count tokens, plan the output cap → rate limits → hold on the budgets →
    dedupe → generate (scripted, or forward to the session's replica) → relay chunks → record

One pipeline for both API surfaces: `chat_completion` (OpenAI's chat completions) and
`message_create` (Anthropic's Messages) differ only in their `Surface` (`surface.py`): how the
body is validated into the chat request every later step works with, the run id's prefix, the
error envelope and how the reply is rendered. `message_token_count` runs the same steps up to
the count, without a run.

Each step is a small function with one job in this package's modules (`accept`, `validate`,
`plan`, `limits`, `budget`, `generate`, `finish`); this module only puts them in order. What the
steps decide goes into the request's `Plan`, and its run is recorded from it (`record`): a
refused request (4xx) is still a run of the key's organization, with the body as received and
the error body as sent, and however a request ends, its run's close settles its budget hold.
Only a request without a valid key is not a run: it has no organization to belong to (the
operation's auth refuses it before the pipeline starts).
"""

from __future__ import annotations

import logging

from django.http import HttpResponse

from accounts.models import ApiKey
from core.errors import MortarError
from core.http.requests import ApiRequest
from core.http.responses import EventStreamResponse
from core.tracing import annotate, step
from gateway.anthropic.validation import validate_count_tokens_request
from gateway.contract.headers import read_mortar_headers
from gateway.coordination.dedupe import in_flight_board
from gateway.pipeline.accept import accept, body_within_limit, receive
from gateway.pipeline.budget import hold_budget
from gateway.pipeline.finish import share
from gateway.pipeline.generate import generate
from gateway.pipeline.limits import rate_limits_check
from gateway.pipeline.plan import Plan, plan, plan_prompt, resolve
from gateway.pipeline.record import run_record
from gateway.pipeline.surface import CHAT_COMPLETIONS, MESSAGES, Surface

logger = logging.getLogger(__name__)


async def chat_completion(request: ApiRequest, key: ApiKey) -> HttpResponse | EventStreamResponse:
    """`POST /v1/chat/completions`."""
    return await complete(request, key, CHAT_COMPLETIONS)


async def completion_for_key(
    request: ApiRequest, key: ApiKey, surface: Surface, *, rerun_of: str | None = None
) -> HttpResponse | EventStreamResponse:
    """A request already authenticated as `key`, on `surface`: a re-run (`rerun_of` names the
    run it sends again, `gateway.reruns`) or the dashboard's playground, run in-process.

    The same pipeline as the routes' from its first step; staff never need a key's secret."""
    return await complete(request, key, surface, rerun_of=rerun_of)


async def message_create(request: ApiRequest, key: ApiKey) -> HttpResponse | EventStreamResponse:
    """`POST /v1/messages`."""
    return await complete(request, key, MESSAGES)


async def complete(
    request: ApiRequest, key: ApiKey, surface: Surface, *, rerun_of: str | None = None
) -> HttpResponse | EventStreamResponse:
    accepted = accept(surface.id_prefix)
    organization = key.organization
    annotate(run_id=accepted.completion_id, organization=organization.name)
    received = receive(request, key)
    decided = Plan(
        run_id=accepted.completion_id, surface=surface, received=received, rerun_of=rerun_of
    )
    record = run_record(decided, accepted, key, route=request.path)

    try:
        body = received.within_limit()
        await plan(request, body, key, decided)
        await rate_limits_check(key=key, decided=decided)
        await hold_budget(key, decided)
        claim = None
        if decided.dedupe is not None:
            with step("dedupe"):
                claim = await in_flight_board().claim(
                    organization.id, decided.dedupe, accepted.completion_id
                )
    except MortarError as error:
        return await record.refused(error)
    except Exception:
        # Mortar's own fault: answered and recorded as the 500 it is.
        logger.exception("The request of %s failed before generating", accepted.completion_id)
        return await record.refused(MortarError("Mortar failed to handle the request."))
    except BaseException:
        record.cancel()  # the client went away (its hold, if one was taken, is released)
        raise

    if claim is None:
        return await generate(record, organization)
    if claim.role == "shared":
        # The leader's run is charged for the generation; this one costs nothing.
        return await share(claim, record)
    decided.dedupe_role = "leader"
    try:
        response = await generate(record, organization)
    except BaseException:
        await claim.abandon(surface.envelope)
        raise
    assert isinstance(response, HttpResponse)  # dedupe is for non-streaming requests only
    await claim.answer(response)
    return response


async def message_token_count(request: ApiRequest, key: ApiKey) -> int:
    """`POST /v1/messages/count_tokens`: the prompt tokens `POST /v1/messages` would bill for
    the same body and headers — the same validation, translation, model, tool selector,
    optimizer and counter — and no run (nothing is generated)."""
    body = body_within_limit(request)
    chat = validate_count_tokens_request(body)
    mortar_headers = read_mortar_headers(request)
    decided = Plan(run_id="", surface=MESSAGES)
    model, _ = await resolve(chat, decided, key)
    MESSAGES.admit(model, chat)
    await plan_prompt(chat, mortar_headers, key.organization, decided, body_bytes=len(body))
    return decided.prompt_tokens
