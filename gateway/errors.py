"""Mortar's error vocabulary, rendered once as the OpenAI error envelope.

    MortarError                     (status, type, code)
    ├── InvalidRequest              400 invalid_request_error
    │   ├── InvalidJson             400 invalid_json
    │   ├── InvalidParameter        400 invalid_parameter
    │   ├── InvalidRole             400 invalid_role
    │   ├── InvalidTools            400 invalid_tools
    │   ├── InvalidToolChoice       400 invalid_tool_choice
    │   └── ContextLengthExceeded   400 context_length_exceeded
    ├── RequestTooLarge             413 request_too_large
    ├── AuthenticationError         401 missing_key / invalid_key
    ├── ModelNotFound               404 model_not_found
    ├── ModelNotAvailable           503 model_not_available
    ├── RouteNotFound               404 not_found
    └── UpstreamError               502 upstream_error       (a model server failed)
        ├── UpstreamUnavailable     503 upstream_unavailable (could not be reached)
        ├── UpstreamTimeout         504 upstream_timeout
        └── UpstreamRejected        its 4xx, upstream_error  (it refused the request)

Every error carries the HTTP status, the envelope's ``type`` and ``code`` and, where one field
is to blame, its ``param``.
"""

from __future__ import annotations

from typing import Any


class MortarError(Exception):
    status = 500
    type = "server_error"
    code = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


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


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class RequestTooLarge(MortarError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class MethodNotAllowed(MortarError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class AuthenticationError(MortarError):
    status = 401
    type = "authentication_error"
    code = "invalid_key"


class ModelNotFound(MortarError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class ModelNotAvailable(MortarError):
    status = 503
    type = "server_error"
    code = "model_not_available"


class RouteNotFound(MortarError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class UpstreamError(MortarError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"


class UpstreamUnavailable(UpstreamError):
    status = 503
    code = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamRejected(UpstreamError):
    """A model server's 4xx: its status and message, in Mortar's envelope; never retried."""

    type = "invalid_request_error"

    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status
