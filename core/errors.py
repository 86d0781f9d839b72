"""The base of Mortar's error tree, and the errors more than one layer raises.

    MortarError                     500 server_error / internal_error
    ├── InvalidRequest              400 invalid_request_error
    │   └── InvalidParameter        400 invalid_parameter
    ├── AuthenticationError         401 missing_key / invalid_key / expired_key
    ├── RouteNotFound               404 not_found
    ├── MethodNotAllowed            405 method_not_allowed
    ├── HttpStatusError             any other status Django or ninja answered with
    └── BackendUnavailable          503 backend_unavailable  (Redis where required; the ledger)

Every error carries the HTTP status, the envelope's ``type`` and ``code`` and, where one field
is to blame, its ``param``. The status, type and code of a class are fixed; only
`HttpStatusError` (and errors that answer for another server) take theirs from what was
answered. An error that says when to come back carries `retry_after` (whole seconds), sent as
`Retry-After`.

An error only one app raises is that app's, below these: the gateway's refusals and a model
server's failures (`gateway.errors`), money's (`billing.errors`), the run store's and the
telemetry stream's (`telemetry.errors`).

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


class InvalidParameter(InvalidRequest):
    code = "invalid_parameter"


class AuthenticationError(MortarError):
    status = 401
    type = "authentication_error"
    code = "invalid_key"


class RouteNotFound(MortarError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(MortarError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class HttpStatusError(MortarError):
    """A status Django or ninja answered with by themselves (never one Mortar raises)."""

    code = "http_error"

    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status
        self.type = "invalid_request_error" if status < 500 else "server_error"


class BackendUnavailable(MortarError):
    """A store the request cannot be answered without is away: the backplane (Redis) where
    it is required — the worker serves what it can without it, and this where it cannot —
    or the budget ledger's database."""

    status = 503
    type = "server_error"
    code = "backend_unavailable"


def error_for_status(status: int, message: str) -> MortarError:
    """The error for a status answered outside Mortar's code (the router, the method check)."""
    if status == 404:
        return RouteNotFound(message)
    if status == 405:
        return MethodNotAllowed(message)
    return HttpStatusError(message, status=status)
