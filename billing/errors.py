"""Money's refusals: a request its budgets cannot pay, or its rate limits have no room for.

InsufficientQuota               402 insufficient_quota   (a budget cannot pay for it)
RateLimitExceeded               429 rate_limit_exceeded  (an organization's or key's limit)
"""

from __future__ import annotations

from core.errors import MortarError


class InsufficientQuota(MortarError):
    """The organization's or the key's budget cannot pay for the prompt and one output token."""

    status = 402
    type = "insufficient_quota"
    code = "insufficient_quota"


class RateLimitExceeded(MortarError):
    """Over an organization's or a key's requests or tokens per minute."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after
