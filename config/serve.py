"""Serve Mortar with uvicorn, and exit 0 after a graceful shutdown: `python -m config.serve`.

Takes uvicorn's options (`--host`, `--port`, `--workers`, …) and serves
`config.asgi:application`. Two things differ from the `uvicorn` command:

- After its graceful shutdown uvicorn restores the SIGTERM handler it found and raises the
  signal again; with the default handler the process then dies of it (exit status 143), and
  an orchestrator reads a clean stop as a failure. The handler installed here, before uvicorn
  starts (and in each worker uvicorn spawns: they import this module again), exits 0 instead.
- `--timeout-graceful-shutdown` defaults to `MORTAR_SHUTDOWN_GRACE_SECONDS` plus a margin:
  the gateway stops its own generations when the grace runs out (gateway/coordination/
  shutdown.py); uvicorn's timeout only ends what is left after that (a replay, a slow client).
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

APPLICATION = "config.asgi:application"
BACKSTOP_MARGIN_SECONDS = 10  # time for the stopped streams' endings to reach their clients


def exit_cleanly(signum: int, frame: FrameType | None) -> None:
    """End the process with status 0: uvicorn has already shut down gracefully."""
    raise SystemExit(0)


def uvicorn_arguments(arguments: list[str]) -> list[str]:
    """uvicorn's command line for Mortar: the application, then the caller's options."""
    if not any(a.startswith("--timeout-graceful-shutdown") for a in arguments):
        try:
            grace = float(os.environ.get("MORTAR_SHUTDOWN_GRACE_SECONDS", "") or 30)
        except ValueError:
            grace = 30  # the workers' settings refuse the value, saying why
        backstop = int(grace) + BACKSTOP_MARGIN_SECONDS
        arguments = [*arguments, "--timeout-graceful-shutdown", str(backstop)]
    return [APPLICATION, *arguments]


# In the supervisor (`__main__`) and in each worker uvicorn spawns, which runs this module again
# as multiprocessing's main module (`__mp_main__`); never in a process that merely imports it.
if __name__ in {"__main__", "__mp_main__"}:
    signal.signal(signal.SIGTERM, exit_cleanly)

if __name__ == "__main__":
    from uvicorn.main import main

    from config.workers import refusal

    prog = "python -m config.serve"
    context = main.make_context(prog, uvicorn_arguments(sys.argv[1:]))
    workers = context.params["workers"] or int(os.environ.get("WEB_CONCURRENCY", "") or 1)
    # Refused here too, before a worker starts: the workers' own refusal (config/asgi.py)
    # stops the supervisor, which then exits 0 — a start that failed must not look clean.
    refused = refusal(workers=workers, redis_url=os.environ.get("REDIS_URL", ""))
    if refused:
        sys.exit(f"{prog}: {refused}")
    with context:
        main.invoke(context)
