"""Anthropic's Messages API under /v1/messages: create a message, count its tokens.

The router declares the route's envelope, Anthropic's (`SURFACE.envelope`): every answer of
the route — an operation's, a key refused, a wrong method, an unknown sub-path — is in it, with
Anthropic's `request-id` header. Thin, like the gateway's other operations: each calls the one
pipeline with the Messages surface.
"""

from __future__ import annotations

from django.http import HttpResponse, HttpResponseBase

from accounts.auth import api_key_auth, key_of
from core.http.requests import ApiRequest
from core.http.responses import json_response
from core.http.routes import ApiRouter
from gateway.pipeline import complete, prompt_token_count
from gateway.pipeline.accept import request_body_within_limit
from gateway.surfaces.messages import SURFACE
from gateway.surfaces.messages.docs import (
    COUNT_TOKENS_DOCS,
    COUNT_TOKENS_RESPONSES,
    MESSAGE_DOCS,
    MESSAGE_RESPONSES,
)
from gateway.surfaces.messages.validation import validate_count_tokens_request

# Mounted at the surface's path (config.api).
router = ApiRouter(auth=api_key_auth(), envelope=SURFACE.envelope)


@router.post(
    "",
    operation_id="create_message",
    tags=["Messages"],
    summary="Create a message (Anthropic's Messages API)",
    response=MESSAGE_RESPONSES,
    openapi_extra=MESSAGE_DOCS,
)
async def create_message(request: ApiRequest) -> HttpResponseBase:
    """Create a message: one Message object, or Anthropic's stream of server-sent events."""
    return await complete(request, key_of(request), SURFACE)


@router.post(
    "/count_tokens",
    operation_id="count_message_tokens",
    tags=["Messages"],
    summary="Count a message's input tokens",
    response=COUNT_TOKENS_RESPONSES,
    openapi_extra=COUNT_TOKENS_DOCS,
)
async def count_message_tokens(request: ApiRequest) -> HttpResponse:
    """Count the input tokens `POST /v1/messages` would bill for this request: the same
    validation, translation, model, tool selector, optimizer and counter, and no run."""
    chat = validate_count_tokens_request(request_body_within_limit(request))
    count = await prompt_token_count(request, key_of(request), SURFACE, chat)
    return json_response({"input_tokens": count})
