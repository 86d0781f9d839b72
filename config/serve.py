"""Serve Mortar with uvicorn, and exit 0 after a graceful shutdown: `python -m config.serve`.

Takes uvicorn's options (`--host`, `--port`, `--workers`, …) and serves
`config.asgi:application`. What differs from the `uvicorn` command:

- After its graceful shutdown uvicorn restores the SIGTERM handler it found and raises the
  signal again; with the default handler the process then dies of it (exit status 143), and
  an orchestrator reads a clean stop as a failure. The handler installed here, before uvicorn
  starts (and in each worker uvicorn spawns: they import this module again), exits 0 instead.
- `--timeout-graceful-shutdown` defaults to `MORTAR_SHUTDOWN_GRACE_SECONDS` plus a margin:
  the gateway stops its own generations when the grace runs out (gateway/coordination/
  shutdown.py); uvicorn's timeout only ends what is left after that (a replay, a slow client).
- Whose `X-Forwarded-For` uvicorn honours is `MORTAR_TRUSTED_PROXIES`' to say (none by
  default), never uvicorn's own default (any client on loopback).
- With several workers, the supervisor stops listening the moment it is told to stop
  (`Supervisor`): new connections are refused at once, as with one worker, while the workers
  finish what they are serving.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from types import FrameType

from uvicorn.config import Config
from uvicorn.supervisors import Multiprocess

from core.http.forwarding import trusted_proxies

APPLICATION = "config.asgi:application"
BACKSTOP_MARGIN_SECONDS = 10  # time for the stopped streams' endings to reach their clients
# Whom uvicorn believes about the client's address: MORTAR_TRUSTED_PROXIES decides, so that the
# sign-in lockout (dashboard/lockout.py) and uvicorn agree.
PROXY_OPTIONS = ("--proxy-headers", "--no-proxy-headers", "--forwarded-allow-ips")


class Supervisor(Multiprocess):
    """uvicorn's supervisor of several workers, closing the listening socket on SIGTERM/SIGINT.

    uvicorn's own keeps its copy of the socket open until every worker has exited: each worker
    closes its copy when it starts shutting down, but the kernel goes on completing connections
    on the supervisor's, which nobody accepts any more. They hang until the last worker is done
    (up to the graceful timeout), then are reset. Here the supervisor's copy is closed in the
    signal handler and the workers are told to stop at once (uvicorn would tell them up to half
    a second later, on its next pass): once each has closed its copy, the port is closed and a
    new connection is refused.
    """

    def __init__(self, config: Config, sockets: list[socket.socket]) -> None:
        super().__init__(config, sockets)
        self._stopping = False
        for stop in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop, self._stop_listening)

    def _stop_listening(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True
        for listener in self.sockets:
            listener.close()
        for worker in self.processes:
            if worker.pid is not None and worker.exitcode is None:
                # uvicorn sends SIGTERM again when it terminates them: a worker ignores it.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGTERM)
        self.signal_queue.append(signum)  # uvicorn's own handling: wait for them, then exit

    def keep_subprocess_alive(self) -> None:
        # A worker that has finished and exited is not replaced: the supervisor is stopping
        # (uvicorn would only know on its next pass, and start a worker without a socket).
        if not self._stopping:
            super().keep_subprocess_alive()


def exit_cleanly(signum: int, frame: FrameType | None) -> None:
    """End the process with status 0: uvicorn has already shut down gracefully."""
    raise SystemExit(0)


def proxy_arguments(trusted: str) -> list[str]:
    """uvicorn's options for `MORTAR_TRUSTED_PROXIES`: honour `X-Forwarded-For` and
    `X-Forwarded-Proto` from those proxies only, or from nobody when there are none (uvicorn
    alone would trust any client on loopback)."""
    try:
        proxies = trusted_proxies(trusted)
    except ValueError as error:
        raise ValueError(f"MORTAR_TRUSTED_PROXIES: {error}") from None
    if not proxies:
        return ["--no-proxy-headers"]
    return ["--proxy-headers", "--forwarded-allow-ips", ",".join(str(p) for p in proxies)]


def uvicorn_arguments(arguments: list[str]) -> list[str]:
    """uvicorn's command line for Mortar: the application, then the caller's options."""
    for option in PROXY_OPTIONS:
        if any(a == option or a.startswith(option + "=") for a in arguments):
            raise ValueError(f"set MORTAR_TRUSTED_PROXIES rather than {option}")
    arguments = [*arguments, *proxy_arguments(os.environ.get("MORTAR_TRUSTED_PROXIES", ""))]
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
    try:
        arguments = uvicorn_arguments(sys.argv[1:])
    except ValueError as error:
        sys.exit(f"{prog}: {error}")
    context = main.make_context(prog, arguments)
    workers = context.params["workers"] or int(os.environ.get("WEB_CONCURRENCY", "") or 1)
    # Refused here too, before a worker starts: the workers' own refusal (config/asgi.py)
    # stops the supervisor, which then exits 0 — a start that failed must not look clean.
    refused = refusal(workers=workers, redis_url=os.environ.get("REDIS_URL", ""))
    if refused:
        sys.exit(f"{prog}: {refused}")
    # What uvicorn's `run` starts for --workers N (`uvicorn.main` the package attribute is the
    # function of that name: the module is taken from sys.modules).
    sys.modules["uvicorn.main"].Multiprocess = Supervisor  # type: ignore[attr-defined]
    with context:
        main.invoke(context)
