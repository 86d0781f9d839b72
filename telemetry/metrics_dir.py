"""Where the worker processes of one server keep their Prometheus metrics, so that N of them
report one consistent set.

prometheus-client's multiprocess mode writes each process's values to files in
`PROMETHEUS_MULTIPROC_DIR`, read together when `/metrics` is scraped; the variable must be set
before prometheus_client creates its first metric, and the directory must start empty for each
run of the server (stale files would add an earlier run's counts to this one's).

When the variable is not set, each run of the server gets a directory of its own:
`$MORTAR_VAR_DIR/metrics/<pid of the parent process>` — with `uvicorn --workers N` the parent is
uvicorn's supervisor, so its N workers share one directory and a restart gets a new one.

Cleaning without a race between workers starting together: each process leaves a marker
(`pid-<pid>`, holding the process's start time, so a pid reused after a restart in a container
is not taken for the old process) under an exclusive lock. A process that finds no marker of a
live process empties the directory first: it is the first of a new run. A process that finds
live ones leaves their files alone, and removes the live-gauge files of dead ones (a worker the
supervisor restarted), as prometheus-client's `mark_process_dead` does. Directories of parents
no longer alive are removed too.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from django.conf import settings

ENV = "PROMETHEUS_MULTIPROC_DIR"
MARKER_PREFIX = "pid-"


def process_start(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot, from /proc), '' where /proc
    is not there, None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    # The command name (2nd field) may hold spaces: count fields from after its ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(marker: Path) -> bool:
    pid = int(marker.name.removeprefix(MARKER_PREFIX))
    started = process_start(pid)
    return started is not None and started == marker.read_text().strip()


def _empty(directory: Path) -> None:
    for entry in directory.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _remove_dead_parents(root: Path, own: Path) -> None:
    for entry in root.iterdir():
        if entry == own or not entry.is_dir() or not entry.name.isdigit():
            continue
        markers = list(entry.glob(f"{MARKER_PREFIX}*"))
        if process_start(int(entry.name)) is None and not any(_alive(m) for m in markers):
            shutil.rmtree(entry, ignore_errors=True)
            (root / f".{entry.name}.lock").unlink(missing_ok=True)


def claim_metrics_dir(directory: Path) -> list[int]:
    """Join `directory` as this process's metrics directory, emptied if no live process uses
    it; return the pids of dead processes whose live gauges must be dropped."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory.parent / f".{directory.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        markers = list(directory.glob(f"{MARKER_PREFIX}*"))
        dead = [m for m in markers if not _alive(m)]
        if len(dead) == len(markers):
            _empty(directory)
            dead = []
        for marker in dead:
            marker.unlink(missing_ok=True)
        own = directory / f"{MARKER_PREFIX}{os.getpid()}"
        own.write_text(process_start(os.getpid()) or "")
    return [int(m.name.removeprefix(MARKER_PREFIX)) for m in dead]


def use_metrics_dir() -> tuple[Path, list[int]]:
    """Choose, clean and announce (in the environment) this process's metrics directory."""
    configured = os.environ.get(ENV, "").strip()
    if configured:
        directory = Path(configured)
    else:
        root = Path(settings.VAR_DIR) / "metrics"
        directory = root / str(os.getppid())
        root.mkdir(parents=True, exist_ok=True)
        _remove_dead_parents(root, directory)
    dead = claim_metrics_dir(directory)
    os.environ[ENV] = str(directory)
    return directory, dead
