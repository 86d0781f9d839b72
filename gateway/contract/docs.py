"""The gateway operations' OpenAPI details that ninja cannot infer from their signatures.

`POST /v1/chat/completions` reads its body itself — the pipeline records even a refused body as
a run, in order: auth, the 413 limit, then validation — so its request body is declared here,
from the same schema the validation uses; so are its headers and its event stream. Ninja's
`response=` declares the JSON responses.
"""

from __future__ import annotations

from typing import Any

from core.http.envelopes import ErrorEnvelope
from core.http.openapi import (
    SchemaRef,
    error_responses,
    event_stream_content,
    json_content,
    json_text,
)
from gateway.contract.budget import BudgetReport
from gateway.contract.examples import (
    CHAT_COMPLETIONS,
    CHAT_REQUESTS,
    EVENT_STREAM_EXAMPLE,
    MODEL_NOT_FOUND,
    NOT_RUNNING,
    STOPPED,
)
from gateway.contract.request import ChatCompletionRequest
from gateway.contract.response import ChatCompletion, ChatCompletionChunk, ModelList, StopResult


def _header(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"in": "header", "name": name, "description": description, "schema": schema}


CHAT_REQUEST_HEADERS = [
    _header(
        "X-Mortar-Session",
        "Names the conversation within your organization: up to 128 letters, digits, `-`, "
        "`_`, `.` or `:` (other characters are dropped). Defaults to `user`.",
        {"type": "string", "maxLength": 128, "examples": ["checkout-42"]},
    ),
    _header(
        "X-Mortar-Optimize",
        "`off`, `on`, or a comma-separated list of opt-in passes such as `json-tool-blocks` "
        "and `collapse-spaces`. An unknown value is refused with 400.",
        {"type": "string", "examples": ["off", "on", "json-tool-blocks,collapse-spaces"]},
    ),
    _header(
        "X-Mortar-Tool-Select",
        "`named` keeps only the function an object-form `tool_choice` names.",
        {"type": "string", "enum": ["named"]},
    ),
    _header(
        "X-Mortar-Dedupe",
        "`in-flight` coalesces concurrent, byte-identical non-streaming requests; needs "
        "`stream: false` and an `Idempotency-Key`.",
        {"type": "string", "enum": ["in-flight"]},
    ),
    _header(
        "Idempotency-Key",
        "With in-flight deduplication: 1 to 128 letters, digits, `.`, `_`, `-` or `:`.",
        {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
    ),
    _header(
        "X-Request-Id",
        "Your own ID for the request, echoed back in the response.",
        {"type": "string", "pattern": "^[\\x21-\\x7e]{1,128}$"},
    ),
]


def _response_header(description: str) -> dict[str, Any]:
    return {"description": description, "schema": {"type": "string"}}


# An event of a streamed completion: a chunk, the error that ended it, or the end.
CHUNK_DATA = {
    "anyOf": [
        json_text({"anyOf": [SchemaRef(ChatCompletionChunk), SchemaRef(ErrorEnvelope)]}),
        {"const": "[DONE]"},
    ]
}

COMPLETION_HEADERS = {
    "X-Mortar-Request-Id": _response_header(
        "The completion's ID, as in the body; pass it to stop the generation."
    ),
    "X-Mortar-Run-Id": _response_header("The run that records this request."),
    "X-Mortar-Deployment": _response_header("The deployment that served the request."),
    "X-Mortar-Model": _response_header("The model that generated the reply."),
    "X-Mortar-Upstream": _response_header(
        "The replica that answered, by name (`<deployment>/<position>`, e.g. `vllm-a/1`), "
        "when the deployment forwards; never its URL."
    ),
    "X-Mortar-Session": _response_header("The session the request ran in."),
    "X-Mortar-Optimizer": _response_header("What the prompt optimizer did, or would do."),
    "X-Mortar-Tool-Selector": _response_header("What named tool selection did, when it ran."),
    "X-Mortar-Dedupe": _response_header("`leader` or `shared`, with in-flight deduplication."),
    "X-Request-Id": _response_header("Your `X-Request-Id`, or one Mortar generated."),
}

# OpenAI's rate-limit headers (its SDKs and clients read them), on every answer when the
# organization or the key has request or token limits: the tightest limit of each kind.
RATE_LIMIT_HEADERS = {
    f"x-ratelimit-{part}-{kind}": _response_header(description.format(kind=kind))
    for kind in ("requests", "tokens")
    for part, description in (
        ("limit", "The tightest {kind}-per-minute limit that applies."),
        ("remaining", "What that limit has left now."),
        ("reset", "How long until it is whole again, e.g. `1s`, `6m0s`."),
    )
}
RETRY_AFTER = {
    "Retry-After": {
        "description": "Whole seconds (at least 1) until a request would pass.",
        "schema": {"type": "integer", "minimum": 1},
    }
}
# Spend control's answers, described the same on both API surfaces.
SPEND_CONTROL_DOCS: dict[int, dict[str, Any]] = {
    402: {
        "description": "A budget (the organization's or the key's) cannot pay for the prompt "
        "and one output token: `insufficient_quota` (Messages: `billing_error`). Retrying "
        "will not help until the period resets; see `GET /v1/budget`."
    },
    429: {
        "description": "A request or token rate limit of the organization or the key is "
        "reached, or the model server's own (its `Retry-After` passed on): "
        "`rate_limit_exceeded` (Messages: `rate_limit_error`).",
        "headers": {**RETRY_AFTER, **RATE_LIMIT_HEADERS},
    },
    529: {
        "description": "The model server says it is overloaded: `overloaded` (Messages: "
        "`overloaded_error`). Retry later.",
    },
}

CHAT_COMPLETION_RESPONSES = {
    200: ChatCompletion,
    **error_responses(400, 401, 402, 403, 404, 409, 413, 429, 502, 503, 504, 529),
}

CHAT_COMPLETION_DOCS: dict[str, Any] = {
    "parameters": CHAT_REQUEST_HEADERS,
    "requestBody": {
        "required": True,
        "content": json_content(SchemaRef(ChatCompletionRequest), examples=CHAT_REQUESTS),
    },
    "responses": {
        200: {
            "description": "The reply: one `chat.completion` object with `stream: false`, else "
            "server-sent events, each a `chat.completion.chunk`, ending with `data: [DONE]`.",
            "headers": {**COMPLETION_HEADERS, **RATE_LIMIT_HEADERS},
            "content": {
                **json_content(examples=CHAT_COMPLETIONS),
                **event_stream_content(
                    {"data": CHUNK_DATA},
                    required=["data"],
                    description="One event: a `chat.completion.chunk`, or `[DONE]` at the end; "
                    "an error mid-stream is one event holding the error envelope, and no "
                    "`[DONE]` follows.",
                    example=EVENT_STREAM_EXAMPLE,
                ),
            },
        },
        400: {"description": "The body or a Mortar header is not valid (the `code` says how)."},
        401: {
            "description": "No API key, or one that is not valid (`invalid_key`) or past its "
            "expiry (`expired_key`)."
        },
        403: {"description": "The key may not use this model (`model_not_allowed`)."},
        404: {
            "description": "`model` isn't in the catalog.",
            "content": json_content(examples={"model_not_found": {"value": MODEL_NOT_FOUND}}),
        },
        409: {"description": "An `Idempotency-Key` reused with a different request."},
        413: {"description": "The body is over 4 MiB."},
        **SPEND_CONTROL_DOCS,
        502: {"description": "The model server failed."},
        503: {"description": "The model isn't deployed, or its server can't be reached."},
        504: {"description": "The model server timed out."},
    },
}

STOP_RESPONSES = {200: StopResult, 404: StopResult, **error_responses(401)}
STOP_DOCS: dict[str, Any] = {
    "responses": {
        200: {
            "description": "A running generation was stopped.",
            "content": json_content(examples={"stopped": {"value": STOPPED}}),
        },
        404: {
            "description": "No generation with that ID is running for your organization: it "
            "finished, the ID is wrong, or another organization started it.",
            "content": json_content(examples={"not_running": {"value": NOT_RUNNING}}),
        },
    }
}

MODELS_RESPONSES = {200: ModelList, **error_responses(401)}
BUDGET_RESPONSES = {200: BudgetReport, **error_responses(401)}
