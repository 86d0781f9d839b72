"""Start the servers as child processes, wait for them to answer, and stop every one of them."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from .constants import LOGS, ROOT


@dataclass
class Started:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid


class Processes:
    """Everything this run started, stopped in reverse order by `stop_all`."""

    def __init__(self) -> None:
        self.started: list[Started] = []

    def start(
        self, name: str, command: list[str], *, env: dict[str, str], cwd: Path = ROOT
    ) -> Started:
        log_path = LOGS / f"{name}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so children stop with it
                preexec_fn=_raise_fd_limit,
            )
        started = Started(name, process, log_path)
        self.started.append(started)
        return started

    def stop_all(self) -> None:
        for started in reversed(self.started):
            _stop(started)
        self.started.clear()


def _raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _stop(started: Started) -> None:
    process = started.process
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    # Children left in its session (the session id is the pid we started).
    for pid in session_pids(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def session_pids(sid: int) -> list[int]:
    """The processes in session `sid` (a server we started and everything it forked)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid:  # field 6 of /proc/pid/stat: session id
            pids.append(int(entry.name))
    return pids


def wait_http(url: str, started: Started, timeout: float) -> None:
    """Wait (at most `timeout`) until `url` answers 200; fail if the server exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if started.process.poll() is not None:
            raise RuntimeError(f"{started.name} exited early; see {started.log_path}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.25)
    raise RuntimeError(f"{started.name} did not answer {url} within {timeout:.0f}s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def base_env() -> dict[str, str]:
    """This environment without anything that would point a server at another database."""
    drop = ("DATABASE_URL", "REDIS_URL", "MORTAR_", "DJANGO_SETTINGS_MODULE", "LITELLM_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}
