"""One connection: requests one after another, each timed to its first token (or first byte of
a JSON body) and to its end."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from ..stats import summary_ms
from .connection import Endpoint, connect


async def one_connection(args: argparse.Namespace, endpoint: Endpoint) -> dict[str, Any]:
    """Send requests one after another on one connection; time each one."""
    started = time.perf_counter()
    measure_from = started + args.warmup
    measure_until = measure_from + args.duration
    first: list[float] = []
    total: list[float] = []
    failed = 0
    connection = await connect(endpoint)
    for _ in range(1_000_000):  # bounded; the deadline ends it long before
        now = time.perf_counter()
        if now >= measure_until:
            break
        try:
            response = await asyncio.wait_for(connection.request(endpoint.raw_request), 30)
        except Exception:
            failed += 1
            connection.close()
            connection = await connect(endpoint)
            continue
        if now < measure_from:
            continue
        if response.status != 200:
            failed += 1
            continue
        assert response.done_at is not None and response.first_body_at is not None
        # Time to first token for a stream, to the first byte of the body for JSON.
        first_at = response.token_times[0] if response.token_times else response.first_body_at
        first.append(first_at - response.sent_at)
        total.append(response.done_at - response.sent_at)
    connection.close()
    return {
        "mode": "latency",
        "duration_s": args.duration,
        "requests": len(total),
        "failed": failed,
        "requests_per_s": round(len(total) / args.duration, 1),
        "first": summary_ms(first),
        "total": summary_ms(total),
    }
