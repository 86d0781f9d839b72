"""How many server processes serve beside this one, and the refusal of several without Redis.

Stops, in-flight dedupe, live telemetry and the key cache are shared between worker processes
through Redis; the embedded default keeps them in each process's memory. Under
`uvicorn --workers 2` without `REDIS_URL` a stop would reach the wrong worker (one in four
answered 404 while the generation ran on), so such a start is refused, saying why.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal

import uvicorn
from django.conf import settings

logger = logging.getLogger(__name__)

REFUSAL = (
    "Refusing to serve with {workers} worker processes without REDIS_URL: the embedded mode "
    "keeps running generations, dedupe, live telemetry and cached keys in each process's "
    "memory, so a stop sent to one worker would miss a generation running on another. Set "
    "REDIS_URL (and DATABASE_URL) to share them, or serve with one worker (WORKERS=1)."
)


def uvicorn_workers() -> int:
    """The worker count of the uvicorn supervisor that started this process (1 when none)."""
    # uvicorn's supervisor (`--workers N`, N > 1) starts each worker as a multiprocessing child
    # whose target is called with the server's Config: the only place a worker can read N.
    config = getattr(multiprocessing.current_process(), "_kwargs", {}).get("config")
    if isinstance(config, uvicorn.Config) and not config.reload:
        return max(config.workers, 1)
    return 1


def refusal(*, workers: int, redis_url: str) -> str:
    """Why `workers` server processes must not start, or "" when they may."""
    if workers > 1 and not redis_url.strip():
        return REFUSAL.format(workers=workers)
    return ""


def refusal_of_this_start() -> str:
    """Why this server process must not start, or "" when it may."""
    return refusal(workers=uvicorn_workers(), redis_url=settings.REDIS_URL)


def stop_the_supervisor() -> None:
    """Ask the uvicorn supervisor to stop every worker, rather than restart the refused one."""
    if multiprocessing.parent_process() is not None:
        os.kill(os.getppid(), signal.SIGTERM)


if __name__ == "__main__":
    # `python -m config.workers N`: `make serve` asks before migrating, bootstrapping and
    # printing how to call a server that would not start.
    import sys

    refused = refusal(workers=int(sys.argv[1]), redis_url=os.environ.get("REDIS_URL", ""))
    if refused:
        sys.exit(refused)
