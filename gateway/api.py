"""The OpenAI-compatible HTTP surface under /v1/ (thin: each endpoint calls one function).

`POST /v1/chat/completions` is not routed here: it is served straight from ASGI
(`gateway/chat_endpoint.py`), ahead of Django and ninja.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI, Router
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError

from gateway.auth import authenticate
from gateway.errors import InvalidRequest, MortarError
from gateway.live import live_generations
from gateway.responses import error_response, json_response
from gateway.selectors import model_list
from replay.api import router as replay_router
from telemetry.api import router as telemetry_router

router = Router()


@router.post("/generations/{run_id}/stop")
async def stop_generation(request: HttpRequest, run_id: str) -> HttpResponse:
    """Spec, "Stop a generation": 200 when stopped, else 404 with the same body — finished,
    unknown and another organization's generations are indistinguishable."""
    key = await authenticate(request)
    stopped = await live_generations().stop(run_id, key.organization_id)
    return json_response({"stopped": stopped, "id": run_id}, status=200 if stopped else 404)


@router.get("/models")
async def models(request: HttpRequest) -> HttpResponse:
    await authenticate(request)
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
            ],
        }
    )


api = NinjaAPI(
    title="Mortar",
    version="1",
    urls_namespace="v1",
    docs_url=None,  # the interactive docs load assets from a CDN; Mortar runs offline
)
api.add_router("/", router)
api.add_router("/telemetry", telemetry_router)
api.add_router("/", replay_router)


@api.exception_handler(MortarError)
def on_mortar_error(request: HttpRequest, exc: MortarError) -> HttpResponse:
    return error_response(exc)


@api.exception_handler(NinjaValidationError)
def on_validation_error(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    # Never a 422 (PRODUCT.md decision 3).
    return error_response(InvalidRequest(f"The request is not valid: {exc.errors}"))


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    error = MortarError(str(exc))
    error.status = exc.status_code
    error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    error.code = "method_not_allowed" if exc.status_code == 405 else "http_error"
    return error_response(error)
