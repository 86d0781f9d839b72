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

And a model server's failures:

    UpstreamError                   502 upstream_error       (a model server failed)
    ├── GenerationFailed            502 upstream_error       (the generation broke mid-stream)
    ├── UpstreamUnavailable         503 upstream_unavailable (could not be reached)
    ├── UpstreamTimeout             504 upstream_timeout
    ├── UpstreamOverloaded          529 overloaded           (it said it is overloaded)
    └── UpstreamRejected            its 4xx, upstream_error  (it refused the request)
        └── UpstreamRateLimited     429 rate_limit_exceeded  (its own rate limit)

`UpstreamRejected` takes its status from what the model server answered. A surface's own
refusals sit with its package.
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


class UpstreamError(MortarError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"


class GenerationFailed(UpstreamError):
    """The generation broke in a way that is no model server's fault (logged with its cause)."""


class UpstreamUnavailable(UpstreamError):
    status = 503
    code = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamOverloaded(UpstreamError):
    """A model server's 529, or an error it calls "overloaded": another replica may be tried."""

    status = 529
    type = "overloaded_error"
    code = "overloaded"


class UpstreamRejected(UpstreamError):
    """A model server's 4xx: its status and message, in Mortar's envelope; never retried."""

    type = "invalid_request_error"

    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status


class UpstreamRateLimited(UpstreamRejected):
    """A model server's 429, with its `Retry-After` (when it sent one) passed on."""

    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int | None):
        super().__init__(message, status=429)
        self.retry_after = retry_after


# Every code a model server's failure is counted under in the metrics (a refusal's is
# `upstream_error`).
UPSTREAM_ERROR_CODES = tuple(
    dict.fromkeys(
        error.code
        for error in (
            UpstreamError,
            UpstreamUnavailable,
            UpstreamTimeout,
            UpstreamOverloaded,
            UpstreamRateLimited,
        )
    )
)
