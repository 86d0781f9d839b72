"""`POST /v1/chat/completions`: the chat completions surface's route, in Mortar's envelope.

Thin: it authenticates with the router's auth and hands the request to the pipeline with this
surface. The view reads the body itself (no ninja body parameter): the pipeline records a
refused body as a run, after auth and the 413 limit, before validation.
"""

from __future__ import annotations

from django.http import HttpResponseBase

from accounts.auth import api_key_auth, key_of
from core.http.requests import ApiRequest
from core.http.routes import ApiRouter
from gateway.contract.docs import CHAT_COMPLETION_DOCS, CHAT_COMPLETION_RESPONSES
from gateway.pipeline import complete
from gateway.surfaces.chat import SURFACE

# Mounted at the surface's path (config.api).
router = ApiRouter(auth=api_key_auth(), envelope=SURFACE.envelope)


@router.post(
    "",
    operation_id="create_chat_completion",
    tags=["Chat completions"],
    summary="Create a chat completion",
    response=CHAT_COMPLETION_RESPONSES,
    openapi_extra=CHAT_COMPLETION_DOCS,
)
async def create_chat_completion(request: ApiRequest) -> HttpResponseBase:
    """Create a chat completion: one JSON object, or a stream of server-sent events."""
    return await complete(request, key_of(request), SURFACE)
