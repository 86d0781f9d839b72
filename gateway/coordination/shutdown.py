"""A worker's graceful shutdown: streams in flight get a grace period, then are stopped.

On SIGTERM the server stops accepting and waits for open responses to end (uvicorn does
that). A generation may run for minutes, longer than an orchestrator waits before it kills
the process: once `MORTAR_SHUTDOWN_GRACE_SECONDS` have passed, the generations still running
on this worker are stopped as the Stop button would — the client gets the stopped stream's
ending, the run is stored as `stopped` with error code `worker_shutdown` — so every response
ends, the run writer is flushed by the lifespan shutdown, and the process exits.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.coordination.stop import live_generations

logger = logging.getLogger(__name__)

WORKER_SHUTDOWN = "worker_shutdown"  # the error code of a run the grace period cut


def stop_generations_after(grace_seconds: float) -> None:
    """Stop every generation still running on this worker once `grace_seconds` have passed."""
    live = live_generations()
    logger.info("shutting down: generations in flight get %s s to finish", grace_seconds)

    def stop_the_rest() -> None:
        stopped = live.stop_all(WORKER_SHUTDOWN)
        if stopped:
            logger.warning("shutdown grace over: stopped %d generation(s) in flight", stopped)

    asyncio.get_running_loop().call_later(grace_seconds, stop_the_rest)
