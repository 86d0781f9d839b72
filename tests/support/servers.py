"""Start real server processes on loopback for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from config.serve import proxy_arguments

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_mortar(
    env: Mapping[str, str],
    *,
    log_dir: Path,
    server: str = "uvicorn",
    timeout: float = 30,
    options: Sequence[str] = (),
) -> ServerProcess:
    """Start Mortar's ASGI app as a real process on a free port and wait until it answers.

    `server="serve"` starts it as `make serve` does (`python -m config.serve`), with `options`
    (e.g. `--workers 2`) added to uvicorn's."""
    port = free_port()
    # As `make serve` runs uvicorn (config.serve takes uvicorn's options).
    uvicorn_options = [
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--loop", "core.http.event_loop:new_event_loop"),
        *("--http", "httptools", "--no-access-log"),
    ]
    if server == "serve":
        command = [sys.executable, "-m", "config.serve", *uvicorn_options, *options]
    elif server == "uvicorn":
        # Trusting forwarding headers as config/serve.py has uvicorn do, not uvicorn's default.
        proxies = proxy_arguments(env.get("MORTAR_TRUSTED_PROXIES", ""))
        command = [
            *(sys.executable, "-m", "uvicorn", "config.asgi:application"),
            *uvicorn_options,
            *proxies,
        ]
    elif server == "daphne":
        command = [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "config.asgi:application",
        ]
    else:
        raise ValueError(server)
    log_path = log_dir / f"{server}-{port}.log"
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return wait_until_healthy(
        ServerProcess(process=process, port=port, log_path=log_path), server, timeout
    )


def wait_until_healthy(started: ServerProcess, name: str, timeout: float) -> ServerProcess:
    """Return the server once its /healthz answers; stop it and raise if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if started.process.poll() is not None:
            raise RuntimeError(f"{name} exited with {started.process.returncode}:\n{started.log()}")
        try:
            if httpx.get(f"{started.base_url}/healthz", timeout=1).status_code == 200:
                return started
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    started.stop()
    raise RuntimeError(f"{name} did not answer within {timeout}s:\n{started.log()}")


def start_mock_model(
    *, log_dir: Path, port: int | None = None, timeout: float = 15
) -> ServerProcess:
    """Start the mock vLLM-style model server (`python -m mockmodel`) on a free port."""
    port = port or free_port()
    log_path = log_dir / f"mockmodel-{port}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "mockmodel", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return wait_until_healthy(
        ServerProcess(process=process, port=port, log_path=log_path), "mockmodel", timeout
    )


def stream_completion(
    server: ServerProcess, secret: str, body: dict, *, timeout: float = 30
) -> contextlib.AbstractContextManager[httpx.Response]:
    """POST a chat completion and keep the response open for reading as it streams."""
    return httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=timeout,
    )


CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
# A replayed stream's SSE ids are its own; the rest of its bytes are the run's as first sent.
EVENT_ID_LINE = re.compile(rb"^id: \d+\n", re.MULTILINE)


def without_event_ids(body: bytes) -> bytes:
    return EVENT_ID_LINE.sub(b"", body)


def signed_in(
    server: ServerProcess, username: str, password: str, *, next_page: str = "/dashboard/runs/"
) -> httpx.Client:
    """A client signed in to `server`'s dashboard through its sign-in form, over HTTP."""
    client = httpx.Client(base_url=server.base_url, timeout=30)
    form = client.get("/dashboard/login/")
    assert form.status_code == 200
    token = CSRF_FIELD.search(form.text)
    assert token is not None, form.text
    answer = client.post(
        "/dashboard/login/",
        data={
            "csrfmiddlewaretoken": token.group(1),
            "username": username,
            "password": password,
            "next": next_page,
        },
    )
    assert answer.status_code == 302, answer.text
    assert answer.headers["location"] == next_page
    return client
