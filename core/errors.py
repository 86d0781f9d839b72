"""Mortar's error vocabulary, and the one place its envelopes are built.

    MortarError                     500 server_error / internal_error
    ├── InvalidRequest              400 invalid_request_error
    │   ├── InvalidJson             400 invalid_json
    │   ├── InvalidParameter        400 invalid_parameter
    │   ├── InvalidRole             400 invalid_role
    │   ├── InvalidTools            400 invalid_tools
    │   ├── InvalidToolChoice       400 invalid_tool_choice
    │   ├── InvalidImage            400 invalid_image
    │   ├── ContextLengthExceeded   400 context_length_exceeded
    │   └── UnsupportedSurface      400 unsupported_surface  (a model this route does not serve)
    ├── AuthenticationError         401 missing_key / invalid_key
    ├── InsufficientQuota           402 insufficient_quota   (a budget cannot pay for it)
    ├── RouteNotFound               404 not_found
    ├── ModelNotFound               404 model_not_found
    ├── MethodNotAllowed            405 method_not_allowed
    ├── IdempotencyConflict         409 idempotency_conflict
    ├── RunGone                     410 run_gone
    ├── RequestTooLarge             413 request_too_large
    ├── RateLimitExceeded           429 rate_limit_exceeded  (an organization's or key's limit)
    ├── TooManyStreams              429 too_many_streams     (concurrent telemetry streams)
    ├── HttpStatusError             any other status Django or ninja answered with
    ├── ModelNotAvailable           503 model_not_available
    ├── BackendUnavailable          503 backend_unavailable  (Redis where required; the ledger)
    └── UpstreamError               502 upstream_error       (a model server failed)
        ├── GenerationFailed        502 upstream_error       (the generation broke mid-stream)
        ├── UpstreamUnavailable     503 upstream_unavailable (could not be reached)
        ├── UpstreamTimeout         504 upstream_timeout
        ├── UpstreamOverloaded      529 overloaded           (it said it is overloaded)
        └── UpstreamRejected        its 4xx, upstream_error  (it refused the request)
            └── UpstreamRateLimited 429 rate_limit_exceeded  (its own rate limit)

Every error carries the HTTP status, the envelope's ``type`` and ``code`` and, where one field
is to blame, its ``param``. The status, type and code of a class are fixed; only
`UpstreamRejected` and `HttpStatusError` take theirs from what was answered. An error that
says when to come back carries `retry_after` (whole seconds), sent as `Retry-After`.

An error is rendered in one of three envelopes (`envelope`): the OpenAI one every route uses
(PRODUCT.md decision 3), Arkor's flat one of the replay route, and Anthropic's on the Messages
route (`{"type": "error", "error": {"type", "message"}}`, no `code`: the `type` follows from
the status, `ANTHROPIC_ERROR_TYPES`).
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class Envelope(Enum):
    OPENAI = "openai"  # {"error": {"message", "type", "param", "code"}}
    FLAT = "flat"  # {"error": "…", "code": "…"} (Arkor's, on the replay route)
    ANTHROPIC = "anthropic"  # {"type": "error", "error": {"type", "message"}} (Messages route)


class MortarError(Exception):
    status = 500
    type = "server_error"
    code = "internal_error"
    retry_after: int | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        style: Envelope = Envelope.OPENAI,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        # The envelope of the route that raises it, for the API's one exception handler.
        self.style = style
        if code is not None:
            self.code = code


class InvalidRequest(MortarError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class InvalidJson(InvalidRequest):
    code = "invalid_json"


class InvalidParameter(InvalidRequest):
    code = "invalid_parameter"


class InvalidRole(InvalidRequest):
    code = "invalid_role"


class InvalidTools(InvalidRequest):
    code = "invalid_tools"


class InvalidToolChoice(InvalidRequest):
    code = "invalid_tool_choice"


class InvalidImage(InvalidRequest):
    """An image part a vision model cannot take (Arkor's image rules; PRODUCT.md decision 4)."""

    code = "invalid_image"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class UnsupportedSurface(InvalidRequest):
    """A model sent to a route that does not serve it: Arkor's "400 with a message naming the
    route that does serve it". Not `model_not_available`, which is Mortar's 503 for a model
    that is listed but not deployed."""

    code = "unsupported_surface"


class AuthenticationError(MortarError):
    status = 401
    type = "authentication_error"
    code = "invalid_key"


class InsufficientQuota(MortarError):
    """The organization's or the key's budget cannot pay for the prompt and one output token
    (issue 14); Anthropic's envelope calls a 402 `billing_error`."""

    status = 402
    type = "insufficient_quota"
    code = "insufficient_quota"


class RouteNotFound(MortarError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFound(MortarError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class MethodNotAllowed(MortarError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class IdempotencyConflict(MortarError):
    """The same `Idempotency-Key` with a different request while the first one runs."""

    status = 409
    type = "invalid_request_error"
    code = "idempotency_conflict"


class RunGone(MortarError):
    """A run that is unknown, expired, content-less or another organization's (replay)."""

    status = 410
    type = "invalid_request_error"
    code = "run_gone"


class RequestTooLarge(MortarError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class RateLimitExceeded(MortarError):
    """Over an organization's or a key's requests or tokens per minute (issue 14)."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class TooManyStreams(MortarError):
    """Over an organization's or a key's cap on concurrent telemetry streams (issue 15)."""

    status = 429
    type = "rate_limit_error"
    code = "too_many_streams"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class HttpStatusError(MortarError):
    """A status Django or ninja answered with by themselves (never one Mortar raises)."""

    code = "http_error"

    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status
        self.type = "invalid_request_error" if status < 500 else "server_error"


class ModelNotAvailable(MortarError):
    status = 503
    type = "server_error"
    code = "model_not_available"


class BackendUnavailable(MortarError):
    """A store the request cannot be answered without is away: the backplane (Redis) where
    it is required — the worker serves what it can without it, and this where it cannot —
    or the budget ledger's database."""

    status = 503
    type = "server_error"
    code = "backend_unavailable"


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


def error_for_status(status: int, message: str) -> MortarError:
    """The error for a status answered outside Mortar's code (the router, the method check)."""
    if status == 404:
        return RouteNotFound(message)
    if status == 405:
        return MethodNotAllowed(message)
    return HttpStatusError(message, status=status)


# Anthropic's error `type` for each status (issue 13, the Messages route's error table).
ANTHROPIC_ERROR_TYPES = {
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


def anthropic_error_type(status: int) -> str:
    """Anthropic's error `type` for a status; one the table lacks is a request or an API error."""
    found = ANTHROPIC_ERROR_TYPES.get(status)
    if found is not None:
        return found
    return "invalid_request_error" if status < 500 else "api_error"


def envelope(error: MortarError, style: Envelope | None = None) -> dict[str, Any]:
    """The error's body, in the envelope of the route that answers it (its own by default)."""
    style = style or error.style
    if style is Envelope.FLAT:
        return {"error": error.message, "code": error.code}
    if style is Envelope.ANTHROPIC:
        # No `code` and no `param` (Arkor, "Authentication"): Anthropic's SDKs read the type.
        return {
            "type": "error",
            "error": {"type": anthropic_error_type(error.status), "message": error.message},
        }
    return {
        "error": {
            "message": error.message,
            "type": error.type,
            "param": error.param,
            "code": error.code,
        }
    }
