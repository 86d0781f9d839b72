"""Rate limits: a request must fit its organization's and its key's requests and tokens per
minute; the pipeline checks them after the prompt is counted, before dedupe and generation.

The check takes one request and the prompt's tokens from every limit that is set, all or none
(`Backplane.rate_admit`, `core.ratelimits`: one Lua script in Redis across every worker, or the
process's own limiter in the embedded mode); when the request ends its real usage is counted
(`count_usage`: the completion, and the model server's prompt count where it differs).
Over a limit → 429 `rate_limit_exceeded` with `Retry-After`; the `x-ratelimit-*` headers go on
every response of a limited request, refused or not (`RateLimitCheck.headers`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from accounts.models import ApiKey, Organization
from billing.errors import RateLimitExceeded
from core.backplane import backplane
from core.derived import PerObject
from core.ratelimits import Bucket, BucketState, Verdict, reset_duration


@dataclass(frozen=True)
class RateLimitCheck:
    """What the check decided: the buckets the request was checked against and where they
    stand, for the headers and for counting the usage when the request ends."""

    buckets: tuple[Bucket, ...]
    verdict: Verdict

    def headers(self) -> dict[str, str]:
        """OpenAI's `x-ratelimit-*` headers, for requests and for tokens: of the organization's
        and the key's limits, the one with the least left (the later reset on a tie)."""
        tightest: dict[str, BucketState] = {}
        for bucket, state in zip(self.buckets, self.verdict.states, strict=True):
            unit = "tokens" if bucket.name.endswith("tokens") else "requests"
            best = tightest.get(unit)
            if best is None or (state.remaining, -state.reset_ms) < (
                best.remaining,
                -best.reset_ms,
            ):
                tightest[unit] = state
        headers: dict[str, str] = {}
        for unit in ("requests", "tokens"):
            if (least := tightest.get(unit)) is not None:
                headers[f"x-ratelimit-limit-{unit}"] = str(least.limit)
                headers[f"x-ratelimit-remaining-{unit}"] = str(least.remaining)
                headers[f"x-ratelimit-reset-{unit}"] = reset_duration(least.reset_ms)
        return headers

    def refusal(self) -> RateLimitExceeded:
        """The 429 of a request a limit had no room for (`verdict.admitted` false)."""
        retry_after = max(math.ceil(self.verdict.retry_after_ms / 1000), 1)
        return RateLimitExceeded(
            f"Rate limit reached for {_which(self)}. Try again in {retry_after} s.",
            retry_after=retry_after,
        )

    def token_buckets(self, tokens: int) -> list[Bucket]:
        return [
            Bucket(bucket.name, bucket.limit, tokens)
            for bucket in self.buckets
            if bucket.name.endswith("tokens")
        ]


class Limit(NamedTuple):
    """A limit set on the key or its organization: its bucket's name and units per minute;
    a request takes one unit of a requests limit, its prompt's tokens of a tokens limit."""

    name: str
    per_minute: int
    of_tokens: bool


def _limits_of(key: ApiKey) -> tuple[Limit, ...]:
    organization = key.organization
    return (
        *_owner_limits(f"org:{organization.id}", organization),
        *_owner_limits(f"key:{key.id}", key),
    )


def _owner_limits(owner: str, limits: Organization | ApiKey) -> list[Limit]:
    found = []
    if limits.requests_per_minute:
        found.append(Limit(f"{owner}:requests", limits.requests_per_minute, False))
    if limits.tokens_per_minute:
        found.append(Limit(f"{owner}:tokens", limits.tokens_per_minute, True))
    return found


# Once per key object (a changed key or organization is a new object: core.derived).
limits_of = PerObject(_limits_of)


async def rate_limits_take(*, key: ApiKey, prompt_tokens: int) -> RateLimitCheck | None:
    """Take one request and its prompt's tokens from its organization's and key's limits, all
    or none: where they stand, admitted or not (`verdict.admitted`; the 429 is
    `RateLimitCheck.refusal`). Nothing is decided (None) when no limit is set, or when the limiter
    cannot be reached: requests are admitted then rather than all refused."""
    limits = limits_of(key)
    if not limits:
        return None
    buckets = tuple(
        Bucket(name, per_minute, prompt_tokens if of_tokens else 1)
        for name, per_minute, of_tokens in limits
    )
    verdict = await backplane().rate_admit(buckets)
    if verdict is None:
        return None
    return RateLimitCheck(buckets=buckets, verdict=verdict)


def _which(limited: RateLimitCheck) -> str:
    """The limits without room, in words: "requests per minute on the key (limit 2)"."""
    full = [
        bucket
        for bucket, state in zip(limited.buckets, limited.verdict.states, strict=True)
        if _lacks_room(bucket, state)
    ]
    names = [
        f"{bucket.name.rsplit(':', 1)[1]} per minute on the "
        f"{'organization' if bucket.name.startswith('org:') else 'key'} (limit {bucket.limit})"
        for bucket in full
    ]
    return " and ".join(names) or "this key"


def _lacks_room(bucket: Bucket, state: BucketState) -> bool:
    return state.remaining < min(bucket.cost, bucket.limit)


def count_usage(limited: RateLimitCheck, counted_prompt: int, usage: dict[str, Any]) -> int:
    """Count a finished request's real usage against its token limits: the completion, and
    the difference between the model server's prompt count and the one admitted. Return the
    tokens counted (0 when no tokens limit is set)."""
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    extra = (prompt if isinstance(prompt, int) else counted_prompt) - counted_prompt
    extra += completion if isinstance(completion, int) else 0
    buckets = limited.token_buckets(extra)
    if not buckets or not extra:
        return 0
    backplane().rate_count(buckets)
    return extra
