"""The rate limiter (GCRA buckets), in plain Python at a given clock, and on both backplanes:
the memory one (the embedded mode's, this process) and Redis's Lua script (every worker)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from django.conf import settings

from core.backplane import Backplane
from core.backplane.redis import RATE_LIMIT_SHA, RedisBackplane
from core.ids import new_hex_id
from core.ratelimits import Bucket, BucketState, GcraBuckets, reset_duration

PREFIX = f"{settings.REDIS_PREFIX}-ratelimit-test"
REDIS_URL = settings.REDIS_URL or "redis://127.0.0.1:6379/0"


# --- the algorithm, at a clock the test sets


def test_a_burst_of_the_limit_passes_and_the_next_waits_for_one_unit_to_come_back() -> None:
    buckets, name = GcraBuckets(), new_hex_id()
    now = 1_000_000.0
    verdicts = [buckets.admit([Bucket(name, 3, 1)], now) for _ in range(4)]

    assert [v.admitted for v in verdicts] == [True, True, True, False]
    assert [v.states[0].remaining for v in verdicts] == [2, 1, 0, 0]
    assert verdicts[2].states[0] == BucketState(limit=3, remaining=0, reset_ms=60_000)
    assert verdicts[3].retry_after_ms == 20_000  # one request comes back every 20 s
    # Just before it comes back: still refused; then admitted.
    assert not buckets.admit([Bucket(name, 3, 1)], now + 19_999).admitted
    assert buckets.admit([Bucket(name, 3, 1)], now + 20_000).admitted


def test_limits_that_do_not_divide_a_minute_still_allow_exactly_the_limit() -> None:
    buckets, name = GcraBuckets(), new_hex_id()
    verdicts = [buckets.admit([Bucket(name, 7, 1)], 0.0) for _ in range(8)]
    assert [v.admitted for v in verdicts] == [True] * 7 + [False]
    assert verdicts[6].states[0].remaining == 0


def test_all_buckets_or_none_are_taken() -> None:
    buckets = GcraBuckets()
    roomy, tight = new_hex_id(), new_hex_id()
    assert buckets.admit([Bucket(roomy, 10, 1), Bucket(tight, 1, 1)], 0.0).admitted
    refused = buckets.admit([Bucket(roomy, 10, 1), Bucket(tight, 1, 1)], 0.0)
    assert not refused.admitted
    assert refused.retry_after_ms == 60_000
    # The refused request took nothing from the bucket that had room.
    assert refused.states[0].remaining == 9


def test_tokens_are_admitted_when_the_prompt_fits_and_usage_is_counted_after() -> None:
    buckets, name = GcraBuckets(), new_hex_id()
    assert buckets.admit([Bucket(name, 1000, 600)], 0.0).admitted
    # 400 left: a 500-token prompt waits until 100 tokens have come back (6 s).
    refused = buckets.admit([Bucket(name, 1000, 500)], 0.0)
    assert (refused.admitted, refused.retry_after_ms) == (False, 6_000)
    assert buckets.admit([Bucket(name, 1000, 400)], 0.0).admitted
    # The completion's 300 tokens are counted when the request ends, over the limit.
    buckets.count([Bucket(name, 1000, 300)], 0.0)
    later = buckets.admit([Bucket(name, 1000, 1)], 0.0)
    assert (later.admitted, later.retry_after_ms) == (False, 18_060)


def test_a_prompt_larger_than_a_minute_passes_into_an_empty_bucket_only() -> None:
    buckets, name = GcraBuckets(), new_hex_id()
    assert buckets.admit([Bucket(name, 100, 250)], 0.0).admitted
    refused = buckets.admit([Bucket(name, 100, 250)], 0.0)
    assert refused.retry_after_ms == 150_000  # until the bucket is empty again


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "0ms"), (12, "12ms"), (1000, "1s"), (1500, "1.5s"), (59_999, "59.999s"),
     (60_000, "1m0s"), (360_000, "6m0s"), (90_250, "1m30.25s")],
)  # fmt: skip
def test_reset_is_in_openais_duration_format(ms: int, text: str) -> None:
    assert reset_duration(ms) == text


# --- on both backplanes


async def test_two_workers_share_one_limit(make_plane: Callable[[], Backplane]) -> None:
    first, second = make_plane(), make_plane()
    name = new_hex_id()
    answers = [
        await plane.rate_admit([Bucket(name, 4, 1)])
        for plane in (first, second, first, second, first)
    ]
    assert all(answer is not None for answer in answers)
    assert [a.admitted for a in answers if a] == [True, True, True, True, False]
    assert [a.states[0].remaining for a in answers if a] == [3, 2, 1, 0, 0]
    refused = answers[-1]
    assert refused is not None
    # One request comes back every 15 s; the clock moved a little since the burst.
    assert 14_000 < refused.retry_after_ms <= 15_000


async def test_counted_usage_is_shared_too(make_plane: Callable[[], Backplane]) -> None:
    first, second = make_plane(), make_plane()
    name = new_hex_id()
    assert (await first.rate_admit([Bucket(name, 1000, 100)])) is not None
    first.rate_count([Bucket(name, 1000, 850)])
    await first.barrier()
    verdict = await second.rate_admit([Bucket(name, 1000, 100)])
    assert verdict is not None
    assert not verdict.admitted
    assert verdict.states[0].remaining == 50


@pytest.mark.redis
async def test_the_script_is_sent_again_when_redis_forgot_it() -> None:
    plane = RedisBackplane(REDIS_URL, PREFIX)
    try:
        client = redis.Redis.from_url(REDIS_URL)
        client.script_flush()
        assert client.script_exists(RATE_LIMIT_SHA.decode()) == [False]
        client.close()
        verdict = await plane.rate_admit([Bucket(new_hex_id(), 5, 1)])
        assert verdict is not None and verdict.admitted
        plane.rate_count([Bucket(new_hex_id(), 5, 1)])
        await plane.barrier()
    finally:
        await plane.close()
