"""A model server's failures, as Mortar answers them.

    UpstreamError                   502 upstream_error       (a model server failed)
    ├── GenerationFailed            502 upstream_error       (the generation broke mid-stream)
    ├── UpstreamUnavailable         503 upstream_unavailable (could not be reached)
    ├── UpstreamTimeout             504 upstream_timeout
    ├── UpstreamOverloaded          529 overloaded           (it said it is overloaded)
    └── UpstreamRejected            its 4xx, upstream_error  (it refused the request)
        └── UpstreamRateLimited     429 rate_limit_exceeded  (its own rate limit)

`UpstreamRejected` takes its status from what the model server answered.
"""

from __future__ import annotations

from core.errors import MortarError


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
