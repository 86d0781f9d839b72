"""The chat-completions pipeline, in the order a request goes through it.

    authenticate (the operation's auth) → accept → read body → validate → resolve model →
    images (a model with vision) → session → tool selector → prompt optimizer → count tokens,
    plan the output cap → dedupe →
    generate (scripted, or forward to the session's replica) → relay chunks → record

Each step is a small function with one job in this package's modules (`accept`, `validate`,
`plan`, `generate`, `finish`); this module only puts them in order. A refused request (4xx)
is still recorded as a run of the key's organization, with the body as received and the error
body as sent. Only a request without a valid key is not a run: it has no organization to belong
to (the operation's auth refuses it before the pipeline starts).
"""

from __future__ import annotations

from django.http import HttpResponse

from accounts.models import ApiKey
from core.errors import MortarError
from core.http.requests import AnyRequest
from core.http.responses import EventStreamResponse
from gateway.coordination.dedupe import in_flight_board
from gateway.pipeline.accept import accept, read_body, run_recorder
from gateway.pipeline.finish import refuse, share
from gateway.pipeline.generate import generate
from gateway.pipeline.plan import Plan, plan


async def chat_completion(request: AnyRequest, key: ApiKey) -> HttpResponse | EventStreamResponse:
    accepted = accept()
    organization = key.organization
    recorder = run_recorder(accepted, key, request)
    decided = Plan(run_id=accepted.completion_id)

    try:
        body = read_body(request, recorder)
        await plan(request, body, organization, recorder, decided)
        claim = None
        if decided.dedupe is not None:
            claim = await in_flight_board().claim(
                organization.id, decided.dedupe, accepted.completion_id
            )
    except MortarError as error:
        return refuse(error, recorder, decided)

    if claim is None:
        return await generate(decided, accepted, organization, recorder)
    if claim.role == "shared":
        return await share(claim, recorder, decided)
    decided.dedupe_role = "leader"
    recorder.set(dedupe_role="leader")
    try:
        response = await generate(decided, accepted, organization, recorder)
    except BaseException:
        await claim.abandon()
        raise
    assert isinstance(response, HttpResponse)  # dedupe is for non-streaming requests only
    await claim.answer(response)
    return response
