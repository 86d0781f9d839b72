"""More than one worker process without Redis is refused, saying why: a stop would
reach the wrong worker otherwise."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from config.workers import refusal
from tests.conftest import _server_env
from tests.support.servers import ROOT, free_port

pytestmark = pytest.mark.django_db

UVICORN = [sys.executable, "-m", "uvicorn", "config.asgi:application"]
WHY = "a stop sent to one worker would miss a generation running on another"


def embedded_env(**extra: str) -> dict[str, str]:
    """The server environment without Redis (the database stays the test run's)."""
    return {**_server_env(), "REDIS_URL": "", "DJANGO_SETTINGS_MODULE": "config.settings", **extra}


def test_serve_refuses_two_workers_without_redis_before_starting_any() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "config.serve", "--port", str(free_port()), "--workers", "2"],
        cwd=ROOT,
        env=embedded_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Refusing to serve with 2 worker processes without REDIS_URL" in result.stderr
    assert WHY in result.stderr
    assert "Started server process" not in result.stderr  # no worker was started


def test_serve_reads_the_worker_count_from_web_concurrency_too() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "config.serve", "--port", str(free_port())],
        cwd=ROOT,
        env=embedded_env(WEB_CONCURRENCY="3"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Refusing to serve with 3 worker processes" in result.stderr


def test_plain_uvicorn_with_two_workers_without_redis_stops_instead_of_serving(tmp_path) -> None:
    port = free_port()
    log_path = tmp_path / "uvicorn.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*UVICORN, "--port", str(port), "--workers", "2", "--no-access-log"],
            cwd=ROOT,
            env=embedded_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            # Each worker refuses and asks the supervisor to stop: it must not restart them.
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    output = log_path.read_text()
    assert "Refusing to serve with 2 worker processes without REDIS_URL" in output
    assert WHY in output
    assert "Application startup failed" in output
    assert "Application startup complete" not in output  # no worker ever served
    time.sleep(0.2)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)


def test_one_worker_or_a_shared_redis_is_allowed() -> None:
    assert refusal(workers=1, redis_url="") == ""
    assert refusal(workers=4, redis_url="redis://127.0.0.1:6379/0") == ""
    assert refusal(workers=2, redis_url="  ") != ""


def test_make_serve_refuses_two_workers_without_redis_before_migrating_or_printing(
    tmp_path,
) -> None:
    # A var directory of its own: a migrated database or a bootstrap would leave files there.
    env = {
        **embedded_env(MORTAR_VAR_DIR=str(tmp_path)),
        "DATABASE_URL": "",
        "PATH": f"{ROOT / '.venv' / 'bin'}:/usr/bin:/bin",
    }
    result = subprocess.run(
        # -o: the installed venv and assets count as up to date (no pip, no npm here).
        [
            "make",
            "-o",
            ".venv/.installed-serve",
            "-o",
            "dashboard/static/dashboard/vendor/uPlot.iife.min.js",
            "serve",
            "WORKERS=2",
            f"PORT={free_port()}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "Refusing to serve with 2 worker processes without REDIS_URL" in result.stderr
    assert "migrate" not in result.stdout.split("config.workers", 1)[1]
    assert "Mortar will serve on" not in result.stdout
    assert "API key" not in result.stdout
    assert not (tmp_path / "mortar.sqlite3").exists()
    assert not (tmp_path / "demo-key").exists()
