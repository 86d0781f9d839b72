"""Replay's time to first byte, through the real endpoint: a Mortar served on loopback (`python
-m config.serve`, one worker, as `make serve` runs it) on the scale database, asked for stored
runs (`GET /v1/chat/completions/runs/{id}`) with each run's organization's key, over HTTP.

Time to first byte: from sending the request to the first byte of the response's body (a
stream's first stored event; a JSON run's body), measured by the client on the same host.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.harness.constants import ROOT

from . import database
from .page_timings import Timed, sample_runs

TARGET_MS = 50.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def organization_keys() -> dict[int, str]:
    """A key with a known secret for each scale organization (made once)."""
    from accounts.models import ApiKey, Organization
    from accounts.services import key_create

    keys = {}
    for organization in Organization.objects.filter(name__startswith="scale-org-"):
        secret = f"mk-scale-replay-{organization.pk:04d}-" + "0" * 24
        if not ApiKey.objects.filter(name="scale-replay", organization=organization).exists():
            key_create(organization=organization, name="scale-replay", secret=secret)
        keys[organization.pk] = secret
    return keys


@contextlib.contextmanager
def served_mortar(name: str = database.NAME) -> Iterator[str]:
    """A Mortar serving the scale database on a free port; yields its base URL."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="mortar-scale-serve-") as var:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DATABASE_URL", "REDIS_URL", "MORTAR_", "DJANGO_SETTINGS"))
        }
        env |= {
            "DATABASE_URL": database.server_url(name),
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "MORTAR_VAR_DIR": var,
            "SECRET_KEY": "scale-bench-" + secrets.token_hex(8),
            "LOG_LEVEL": "WARNING",
        }
        log = Path(var) / "serve.log"
        with log.open("wb") as out:
            server = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "config.serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--workers",
                    "1",
                    "--loop",
                    "core.http.event_loop:new_event_loop",
                    "--http",
                    "httptools",
                    "--no-access-log",
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                base = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + 60
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                            break
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"Mortar did not start:\n{log.read_text()[-3000:]}")
                    time.sleep(0.3)
                yield base
            finally:
                server.terminate()
                try:
                    server.wait(30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()


def measure_replay(samples: int) -> Timed:
    """Replay `samples` stored runs (streams and JSON runs, from every day) and time each first
    byte."""
    from telemetry.models import Run

    keys = organization_keys()
    ids = sample_runs(samples * 3 // 4, streams=True) + sample_runs(samples // 4, streams=False)
    owners = dict(Run.objects.filter(pk__in=ids).values_list("pk", "organization_id"))
    timed = Timed("replay, time to first byte (served Mortar, HTTP)", TARGET_MS)
    with served_mortar() as base, httpx.Client(base_url=base, timeout=30) as client:
        for run_id in ids[:3]:  # connect, warm the worker up
            client.get(
                f"/v1/chat/completions/runs/{run_id}",
                headers={"Authorization": f"Bearer {keys[owners[run_id]]}"},
            )
        for run_id in ids:
            headers = {"Authorization": f"Bearer {keys[owners[run_id]]}"}
            began = time.perf_counter()
            with client.stream("GET", f"/v1/chat/completions/runs/{run_id}", headers=headers) as r:
                body = r.iter_raw()
                first = next(body, b"")
                ms = (time.perf_counter() - began) * 1000
                if r.status_code != 200 or not first:
                    raise SystemExit(f"replay of {run_id}: HTTP {r.status_code}")
                for _ in body:
                    pass
            timed.page_ms.append(ms)
    print(f"  {timed.label:<58} p50 {timed.p50:7.1f}  p95 {timed.p95:7.1f} ms", flush=True)
    return timed
