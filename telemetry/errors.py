"""The run store's and the telemetry stream's refusals.

RunGone                         410 run_gone             (unknown, expired, not kept, or
                                                          another organization's)
TooManyStreams                  429 too_many_streams     (concurrent telemetry streams)
"""

from __future__ import annotations

from core.errors import MortarError


class RunGone(MortarError):
    """A run that is unknown, expired, content-less or another organization's (replay)."""

    status = 410
    type = "invalid_request_error"
    code = "run_gone"


class TooManyStreams(MortarError):
    """Over an organization's or a key's cap on concurrent telemetry streams."""

    status = 429
    type = "rate_limit_error"
    code = "too_many_streams"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after
