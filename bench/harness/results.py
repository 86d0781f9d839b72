"""The result file of a benchmark that prints its results: what its latest run printed, kept as
bench/results/<name>.md under a name that does not change (earlier runs stay in git)."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from .constants import RESULTS, ROOT


class _Tee(io.TextIOBase):
    """Writes to the console and keeps a copy."""

    def __init__(self, console: TextIO) -> None:
        self.console = console
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.console.write(text)

    def flush(self) -> None:
        self.console.flush()


@contextlib.contextmanager
def recorded(name: str, title: str) -> Iterator[Path]:
    """Print as usual, and write what was printed to bench/results/<name>.md, headed by when,
    at which commit, on what and with which command it ran. A run that ends with SystemExit (a
    budget missed) is written with its exit status; one that crashes is not written."""
    path = RESULTS / f"{name}.md"
    started = datetime.now(UTC)
    tee = _Tee(sys.stdout)
    status: int | str | None = None  # None: it crashed
    try:
        with contextlib.redirect_stdout(tee):
            yield path
        status = 0
    except SystemExit as exit_:
        status = 0 if exit_.code is None else exit_.code
        raise
    finally:
        if status is not None:
            RESULTS.mkdir(exist_ok=True)
            path.write_text(_document(title, started, status, tee.copy.getvalue()))
            print(f"(written to {path.relative_to(ROOT)})", file=sys.stderr)


def _document(title: str, started: datetime, status: int | str, output: str) -> str:
    command = shlex.join(["python", *sys.orig_argv[1:]])
    ended = "" if status == 0 else f"; it exited with status {status}"
    return (
        f"# {title}\n\n"
        f"`{command}`, {started:%Y-%m-%d %H:%M} UTC, Mortar {_commit()}, on {_machine()}{ended}."
        f"\n\n```\n{output.rstrip()}\n```\n"
    )


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else "")


def _machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs" + (f" ({model})" if model else "")
