"""The gateway's operations under /v1/ beside its surfaces, in Mortar's envelope: re-runs, Stop,
the model list and the budgets. The surfaces' own routes (chat completions, Messages) are in
their packages, `gateway.surfaces`.

Thin: each authenticates with the operation's auth, calls one function, and returns its
response; the API's dispatch (`core.http.dispatch`) calls them. What each accepts and answers
is declared in `gateway.contract` (`docs` for what ninja cannot infer) and served in
/v1/openapi.json.
"""

from __future__ import annotations

from django.http import HttpResponse, HttpResponseBase
from ninja import P, PathEx

from accounts.auth import api_key_auth, key_of
from billing.selectors import budget_report
from core.http.requests import ApiRequest
from core.http.responses import json_response
from core.http.routes import ApiRouter
from core.ids import is_run_id
from gateway.catalog.selectors import model_list
from gateway.contract.docs import (
    BUDGET_RESPONSES,
    MODELS_RESPONSES,
    STOP_DOCS,
    STOP_RESPONSES,
)
from gateway.contract.rerun import RERUN_DOCS, RERUN_RESPONSES
from gateway.coordination.stop import live_generations
from gateway.reruns import rerun

router = ApiRouter(auth=api_key_auth())


# Like a completion's, the view reads the body (the overrides) itself: it is merged into the
# stored request, and the merged body is what is validated.
@router.post(
    "/chat/completions/runs/{run_id}/rerun",
    operation_id="rerun_run",
    tags=["Replay"],
    summary="Re-run a stored run",
    response=RERUN_RESPONSES,
    openapi_extra=RERUN_DOCS,
)
async def rerun_run(
    request: ApiRequest,
    run_id: PathEx[str, P(description="The run to send again: its completion's ID.")],
) -> HttpResponseBase:
    """Send a stored run's request again, as it was or with fields replaced, as a new run."""
    return await rerun(
        run_id=run_id,
        key=key_of(request),
        overrides=request.body,
        headers=request.headers,
        request_id=request.request_id,
    )


@router.post(
    "/generations/{run_id}/stop",
    operation_id="stop_generation",
    tags=["Chat completions"],
    summary="Stop a generation",
    response=STOP_RESPONSES,
    openapi_extra=STOP_DOCS,
)
async def stop_generation(
    request: ApiRequest,
    run_id: PathEx[
        str,
        P(description="The completion's or message's ID (`X-Mortar-Request-Id`)."),
    ],
) -> HttpResponse:
    """Stop a generation still running: 200 when stopped, else 404 with the same body.

    Finished, unknown and another organization's generations are indistinguishable (an id
    tells nobody whether another organization's run exists), and so is an id that could name no
    run (a NUL, say), never looked up."""
    organization_id = key_of(request).organization_id
    stopped = is_run_id(run_id) and await live_generations().stop(run_id, organization_id)
    return json_response({"stopped": stopped, "id": run_id}, status=200 if stopped else 404)


@router.get(
    "/models",
    operation_id="list_models",
    tags=["Models"],
    summary="List models",
    response=MODELS_RESPONSES,
)
async def models(request: ApiRequest) -> HttpResponse:
    """List the model catalog, with each model's context window and whether it is deployed
    (a key limited to some models lists those only)."""
    key = key_of(request)
    return json_response(
        {
            "object": "list",
            "data": [
                {
                    "id": model.id,
                    "object": "model",
                    "created": int(model.created_at.timestamp()),
                    "owned_by": model.owned_by,
                    "context_window": model.context_window,
                    "vision": model.vision,
                    "deployed": model.is_servable,
                }
                for model in await model_list()
                if key.allows_model(model.id)
            ],
        }
    )


@router.get(
    "/budget",
    operation_id="get_budget",
    tags=["Budgets"],
    summary="Read where the budgets stand",
    response=BUDGET_RESPONSES,
)
async def budget(request: ApiRequest) -> HttpResponse:
    """The organization's and the key's budgets in their current period: spent, held by
    requests in flight, and remaining; null where no budget is set."""
    return json_response(await budget_report(key_of(request)))
