"""The metrics directory of a server run: emptied by the first process of a new run, left alone
by the next ones, rid of dead processes' markers and of dead parents' directories."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from telemetry.metrics_dir import ENV, claim_metrics_dir, process_start, use_metrics_dir


@pytest.fixture
def live_process() -> Iterator[int]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


@pytest.fixture
def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def marker(directory: Path, pid: int, started: str | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"pid-{pid}").write_text(process_start(pid) if started is None else started)


def test_a_new_run_empties_what_an_earlier_run_left(tmp_path: Path, dead_pid: int) -> None:
    directory = tmp_path / "1234"
    marker(directory, dead_pid, started="12345")
    (directory / "counter_999.db").write_bytes(b"old counts")
    assert claim_metrics_dir(directory) == []
    assert sorted(p.name for p in directory.iterdir()) == [f"pid-{os.getpid()}"]


def test_a_sibling_alive_keeps_the_counts_and_dead_ones_are_named(
    tmp_path: Path, live_process: int, dead_pid: int
) -> None:
    directory = tmp_path / "1234"
    marker(directory, live_process)
    marker(directory, dead_pid, started="12345")
    (directory / f"counter_{live_process}.db").write_bytes(b"counts")
    assert claim_metrics_dir(directory) == [dead_pid]
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [f"counter_{live_process}.db", f"pid-{live_process}", f"pid-{os.getpid()}"]
    )


def test_a_reused_pid_is_not_taken_for_the_process_that_had_it(
    tmp_path: Path, live_process: int
) -> None:
    directory = tmp_path / "1234"
    marker(directory, live_process, started="1")  # the same pid, started at another time
    (directory / "counter_1.db").write_bytes(b"old counts")
    claim_metrics_dir(directory)
    assert not (directory / "counter_1.db").exists()


def test_without_the_variable_the_directory_is_the_parents(
    tmp_path: Path, settings, monkeypatch: pytest.MonkeyPatch, dead_pid: int
) -> None:
    settings.VAR_DIR = tmp_path
    monkeypatch.setenv(ENV, "")  # restored after the test
    gone = tmp_path / "metrics" / str(dead_pid)
    marker(gone, dead_pid, started="12345")
    directory, dead = use_metrics_dir()
    assert directory == tmp_path / "metrics" / str(os.getppid())
    assert os.environ[ENV] == str(directory)
    assert (directory / f"pid-{os.getpid()}").exists()
    assert not gone.exists()  # its parent and its processes are gone
    assert dead == []


def test_a_configured_directory_is_used_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "chosen"))
    directory, _ = use_metrics_dir()
    assert directory == tmp_path / "chosen"
    assert (directory / f"pid-{os.getpid()}").exists()
