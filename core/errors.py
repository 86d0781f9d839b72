"""Mortar's error vocabulary.

    MortarError                     500 server_error / internal_error
    ├── InvalidRequest              400 invalid_request_error
    │   ├── InvalidJson             400 invalid_json
    │   ├── InvalidParameter        400 invalid_parameter
    │   ├── InvalidRole             400 invalid_role
    │   ├── InvalidTools            400 invalid_tools
    │   ├── InvalidToolChoice       400 invalid_tool_choice
    │   ├── InvalidImage            400 invalid_image
    │   └── ContextLengthExceeded   400 context_length_exceeded
    ├── AuthenticationError         401 missing_key / invalid_key / expired_key
    ├── InsufficientQuota           402 insufficient_quota   (a budget cannot pay for it)
    ├── ModelNotAllowed             403 model_not_allowed    (the key is limited to others)
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
says when to come back carries `retry_after` (whole seconds), sent as `Retry-After`. Apps add
errors of their own below these where only they raise them.

An error is written in the envelope of the route that answers it, which that route declares
(`core.http.envelopes`); the error itself knows nothing of routes.
"""

from __future__ import annotations


class MortarError(Exception):
    status = 500
    type = "server_error"
    code = "internal_error"
    retry_after: int | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
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
    """An image part a vision model cannot take: not a data URL, an unknown format, too large."""

    code = "invalid_image"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class AuthenticationError(MortarError):
    status = 401
    type = "authentication_error"
    code = "invalid_key"


class InsufficientQuota(MortarError):
    """The organization's or the key's budget cannot pay for the prompt and one output token."""

    status = 402
    type = "insufficient_quota"
    code = "insufficient_quota"


class ModelNotAllowed(MortarError):
    """The key may use only some models of the catalog, and this is not one of them."""

    status = 403
    type = "invalid_request_error"
    code = "model_not_allowed"


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
    """Over an organization's or a key's requests or tokens per minute."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class TooManyStreams(MortarError):
    """Over an organization's or a key's cap on concurrent telemetry streams."""

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
