"""Check the request's rate limits (`billing.services.ratelimits`) after its prompt is counted,
before dedupe and generation; what they decided goes on every response (`Plan.headers`)."""

from __future__ import annotations

from accounts.models import ApiKey
from billing.services.ratelimits import rate_limits_take
from gateway.pipeline.plan import Plan


async def rate_limits_check(*, key: ApiKey, decided: Plan) -> None:
    """Take this request from its organization's and key's limits into `decided.rate_limits`
    (for the headers, refused or not), or raise `RateLimitExceeded` when one has no room."""
    limited = decided.rate_limits = await rate_limits_take(
        key=key, prompt_tokens=decided.prompt_tokens
    )
    if limited is not None and not limited.verdict.admitted:
        raise limited.refusal()
