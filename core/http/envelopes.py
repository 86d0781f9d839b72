"""How a route writes its errors: its `Envelope`, declared once where the route is declared.

Mortar's own envelope, `{"error": {"message", "type", "param", "code"}}`, is every route's
unless its router declares another (`core.http.routes.ApiRouter`): a route that speaks a client's
own dialect subclasses `Envelope` beside its code. Every error of a route is answered in its
envelope — the ones its operation raises, and the ones the API answers for it (a wrong method,
an unknown sub-path, a key refused, the database away) — and the API's document declares its
error responses with the envelope's `schema`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from core.errors import MortarError


class ErrorBody(BaseModel):
    message: str = Field(description="What went wrong, for a person to read.")
    type: str = Field(
        description="`invalid_request_error`, `authentication_error`, `server_error` or "
        "`upstream_error`."
    )
    param: str | None = Field(description="The field or header to blame, when one is.")
    code: str = Field(description="A machine-readable code, such as `invalid_parameter`.")


class ErrorEnvelope(BaseModel):
    """Mortar's error envelope: every error of a route that declares no other."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "message": "`messages` is required.",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "invalid_parameter",
                    }
                }
            ]
        }
    )
    error: ErrorBody


class Envelope:
    """Mortar's own error envelope; a route that answers in another subclasses it."""

    # The body's schema, for the API's document.
    schema: ClassVar[type[BaseModel]] = ErrorEnvelope
    # A header that repeats the request id beside `X-Request-Id` on each of the route's answers.
    request_id_header: ClassVar[str | None] = None

    def body(self, error: MortarError) -> dict[str, Any]:
        """The error's body in this envelope."""
        return {
            "error": {
                "message": error.message,
                "type": error.type,
                "param": error.param,
                "code": error.code,
            }
        }


MORTAR_ENVELOPE = Envelope()
