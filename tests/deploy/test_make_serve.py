"""`make serve WORKERS=N`, `make worker` and `make beat` run the commands the topology test and
docker-compose.yml run (read with `make -n`, which prints a recipe without running it)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.servers import ROOT


def recipe(*arguments: str, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    result = subprocess.run(
        ["make", "-n", *arguments],
        cwd=ROOT,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.replace("\\\n", " ")


def serve_line(*arguments: str, **env: str) -> str:
    lines = [
        line for line in recipe("serve", *arguments, **env).splitlines() if "config.serve" in line
    ]
    assert len(lines) == 1
    return " ".join(lines[0].split())


def test_make_serve_serves_the_workers_asked_for_through_config_serve() -> None:
    line = serve_line("WORKERS=3", "PORT=9123")
    assert ".venv/bin/python -m config.serve --host 127.0.0.1 --port 9123 --workers 3" in line
    assert "--loop core.http.event_loop:new_event_loop --http httptools --no-access-log" in line


@pytest.mark.parametrize(
    ("env", "workers"),
    [
        ({}, "1"),  # the embedded default
        ({"DATABASE_URL": "postgres://db/mortar"}, "1"),  # no Redis: one process
        ({"WORKERS": ""}, "1"),
        (
            {"DATABASE_URL": "postgres://db/mortar", "REDIS_URL": "redis://redis:6379/0"},
            str(len(os.sched_getaffinity(0))),  # what `nproc` prints
        ),
    ],
)
def test_make_serve_defaults_to_one_worker_embedded_and_the_core_count_on_redis(
    env: dict[str, str], workers: str
) -> None:
    assert f"--workers {workers} " in serve_line(**env)


def test_make_worker_and_beat_run_the_commands_of_the_compose_file() -> None:
    assert ".venv/bin/celery -A config worker --loglevel INFO" in recipe("worker")
    assert ".venv/bin/celery -A config beat --loglevel INFO --schedule" in recipe("beat")
