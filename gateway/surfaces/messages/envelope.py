"""Anthropic's error envelope, which the Messages route answers every error in.

`{"type": "error", "error": {"type", "message"}}`: no `code` and no `param` — Anthropic's SDKs
read the `type`, which follows from the status (`ERROR_TYPES`). Every answer of the route also
carries Anthropic's `request-id` header beside `X-Request-Id` (the Anthropic SDK reads it as a
response's `_request_id`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.errors import MortarError
from core.http.envelopes import Envelope

# Anthropic's error `type` for each status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """Anthropic's error `type` for a status; one the table lacks is a request or an API error."""
    found = ERROR_TYPES.get(status)
    if found is not None:
        return found
    return "invalid_request_error" if status < 500 else "api_error"


class AnthropicErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = Field(
        description="Follows from the status: `invalid_request_error` (400), "
        "`authentication_error` (401), `billing_error` (402), `permission_error` (403), "
        "`not_found_error` (404), `request_too_large` (413), `rate_limit_error` (429), "
        "`api_error` (500, 502), `timeout_error` (504), `overloaded_error` (503, 529)."
    )
    message: str = Field(description="What went wrong, for a person to read.")


class AnthropicErrorEnvelope(BaseModel):
    """Every error on the Messages route: Anthropic's envelope, without a `code`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "`max_tokens` is required.",
                    },
                }
            ]
        },
    )
    type: Literal["error"]
    error: AnthropicErrorBody


class AnthropicEnvelope(Envelope):
    schema = AnthropicErrorEnvelope
    request_id_header = "request-id"

    def body(self, error: MortarError) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": error_type(error.status), "message": error.message},
        }


ANTHROPIC_ENVELOPE = AnthropicEnvelope()
