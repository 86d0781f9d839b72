"""The gateway's refusals of a request: what it asks for cannot be served as asked.

    InvalidRequest (core)           400 invalid_request_error
    ├── InvalidJson                 400 invalid_json
    ├── InvalidRole                 400 invalid_role
    ├── InvalidTools                400 invalid_tools
    ├── InvalidToolChoice           400 invalid_tool_choice
    ├── InvalidImage                400 invalid_image
    └── ContextLengthExceeded       400 context_length_exceeded
    ModelNotAllowed                 403 model_not_allowed    (the key is limited to others)
    ModelNotFound                   404 model_not_found
    IdempotencyConflict             409 idempotency_conflict
    RequestTooLarge                 413 request_too_large
    ModelNotAvailable               503 model_not_available

A model server's failures are `gateway.upstream.errors`; a surface's own refusals sit with its
package.
"""

from __future__ import annotations

from core.errors import InvalidRequest, MortarError


class InvalidJson(InvalidRequest):
    code = "invalid_json"


class InvalidRole(InvalidRequest):
    code = "invalid_role"


class InvalidTools(InvalidRequest):
    code = "invalid_tools"


class InvalidToolChoice(InvalidRequest):
    code = "invalid_tool_choice"


class InvalidImage(InvalidRequest):
    """An image part a vision model cannot take: not a data URL, an unknown format, too large."""

    code = "invalid_image"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class ModelNotAllowed(MortarError):
    """The key may use only some models of the catalog, and this is not one of them."""

    status = 403
    type = "invalid_request_error"
    code = "model_not_allowed"


class ModelNotFound(MortarError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class IdempotencyConflict(MortarError):
    """The same `Idempotency-Key` with a different request while the first one runs."""

    status = 409
    type = "invalid_request_error"
    code = "idempotency_conflict"


class RequestTooLarge(MortarError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class ModelNotAvailable(MortarError):
    status = 503
    type = "server_error"
    code = "model_not_available"
