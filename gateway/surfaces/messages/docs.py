"""The Messages operations' OpenAPI details that ninja cannot infer from their signatures.

Like chat completions, `POST /v1/messages` reads its body itself (a refused body is recorded as
a run, after auth and the 413 limit), so its request body is declared here from the schema the
validation uses, and so are its headers and its event stream. Errors are Anthropic's envelope.
"""

from __future__ import annotations

from typing import Any

from core.http.openapi import (
    SchemaRef,
    error_responses,
    event_stream_content,
    json_content,
    json_text,
)
from gateway.contract.docs import (
    CHAT_REQUEST_HEADERS,
    COMPLETION_HEADERS,
    RATE_LIMIT_HEADERS,
    SPEND_CONTROL_DOCS,
)
from gateway.surfaces.messages.envelope import ANTHROPIC_ENVELOPE, AnthropicErrorEnvelope
from gateway.surfaces.messages.examples import (
    COUNT_TOKENS_REQUESTS,
    EVENT_STREAM_EXAMPLE,
    MESSAGES,
    MESSAGES_REQUESTS,
    NOT_FOUND,
)
from gateway.surfaces.messages.request import CountTokensRequest, MessagesRequest
from gateway.surfaces.messages.response import Message, StreamEventData, TokenCount

STREAM_EVENT_NAMES = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
]

ANTHROPIC_HEADERS = [
    {
        "in": "header",
        "name": name,
        "description": "Sent by Anthropic's SDKs; accepted and ignored.",
        "schema": {"type": "string"},
    }
    for name in ("anthropic-version", "anthropic-beta")
]
MESSAGE_HEADERS = {
    **COMPLETION_HEADERS,
    "X-Mortar-Request-Id": {
        "description": "The message's ID, as in the body; pass it to stop the generation.",
        "schema": {"type": "string"},
    },
    "request-id": {
        "description": "The request's ID, as in `X-Request-Id` (Anthropic's header).",
        "schema": {"type": "string"},
    },
}

_ERRORS = (400, 401, 402, 403, 404, 409, 413, 429, 502, 503, 504, 529)
MESSAGE_RESPONSES = {200: Message, **error_responses(*_ERRORS, envelope=ANTHROPIC_ENVELOPE)}
MESSAGE_DOCS: dict[str, Any] = {
    "parameters": [*CHAT_REQUEST_HEADERS, *ANTHROPIC_HEADERS],
    "requestBody": {
        "required": True,
        "content": json_content(SchemaRef(MessagesRequest), examples=MESSAGES_REQUESTS),
    },
    "responses": {
        200: {
            "description": "The reply: one Message, or with `stream: true` Anthropic's "
            "server-sent events — `message_start`, each content block's "
            "`content_block_start`, `content_block_delta`s and `content_block_stop`, then "
            "`message_delta` and `message_stop`; `ping` while the model server is quiet.",
            "headers": {**MESSAGE_HEADERS, **RATE_LIMIT_HEADERS},
            "content": {
                **json_content(examples=MESSAGES),
                **event_stream_content(
                    {
                        "event": {"type": "string", "enum": STREAM_EVENT_NAMES},
                        "data": json_text(
                            {
                                "anyOf": [
                                    SchemaRef(StreamEventData),
                                    SchemaRef(AnthropicErrorEnvelope),
                                ]
                            }
                        ),
                    },
                    required=["event", "data"],
                    description="One event; an error after the stream started is one `error` "
                    "event holding Anthropic's error body, and the stream closes.",
                    example=EVENT_STREAM_EXAMPLE,
                ),
            },
        },
        400: {"description": "The body or a Mortar header is not valid (`invalid_request_error`)."},
        401: {
            "description": "No API key, or one that is not valid or past its expiry "
            "(`authentication_error`)."
        },
        403: {"description": "The key may not use this model (`permission_error`)."},
        404: {
            "description": "`model` isn't in the catalog (`not_found_error`).",
            "content": json_content(examples={"not_found_error": {"value": NOT_FOUND}}),
        },
        409: {"description": "An `Idempotency-Key` reused with a different request."},
        413: {"description": "The body is over 4 MiB (`request_too_large`)."},
        **SPEND_CONTROL_DOCS,
        502: {"description": "The model server failed (`api_error`)."},
        503: {
            "description": "The model isn't deployed, or its server can't be reached "
            "(`overloaded_error`)."
        },
        504: {"description": "The model server timed out (`timeout_error`)."},
    },
}

COUNT_TOKENS_RESPONSES = {
    200: TokenCount,
    **error_responses(400, 401, 403, 404, 413, 503, envelope=ANTHROPIC_ENVELOPE),
}
COUNT_TOKENS_DOCS: dict[str, Any] = {
    # The headers that change what is counted: the optimizer and named tool selection.
    "parameters": [
        *(
            header
            for header in CHAT_REQUEST_HEADERS
            if header["name"] in ("X-Mortar-Optimize", "X-Mortar-Tool-Select")
        ),
        *ANTHROPIC_HEADERS,
    ],
    "requestBody": {
        "required": True,
        "content": json_content(SchemaRef(CountTokensRequest), examples=COUNT_TOKENS_REQUESTS),
    },
}
