"""Benchmark Mortar side by side with the LiteLLM proxy and the mock model server itself.

`make bench` runs this. On one machine it:

- creates its own Postgres database (`mortar_bench_gateway`, dropped and re-created; the
  writer benchmark owns `mortar_bench`) and migrates it,
  uses Redis under its own key prefix, and applies a config with one deployment on the mock,
  one organization and one key;
- starts the mock model server (`python -m mockmodel`) on core 1; Mortar (uvicorn, one
  worker, as `make serve` runs it, with Postgres run recording and Redis telemetry on) and the
  LiteLLM proxy (its own virtual environment under bench/.litellm-venv, one worker, a master
  key, no database) on core 0;
- waits (bounded by --wait-quiet) until nothing else burns CPU on the machine, and records
  what it cannot explain per measurement;
- loads them from separate processes on core 1 (wrk for throughput, `bench/loadgen.py` for
  gaps between chunks and one-connection latency), targets interleaved over the rounds. The
  1,000 slow streams are one long stream per connection (a token every 50 ms for the ramp plus
  one measurement), so all of them overlap for a whole measurement;
- prints a table of medians with ratios to `direct` and to `litellm`, writes it to
  bench/results/latest.md, and keeps every raw number in bench/results/latest.json.

Every process it starts is stopped on the way out, whatever happens; every wait is bounded.

    .venv/bin/python bench/run.py [--quick] [--rounds N] [--duration S] [--profile]
    .venv/bin/python bench/run.py --render bench/results/run-<stamp>.json   # table only

`--profile` also records py-spy profiles of Mortar under the 32-connection and slow-stream
loads (needs `.venv/bin/pip install py-spy`); `bench/profile_summary.py` sums them up.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import re
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import redis

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
LOGS = RESULTS / "logs"
PYTHON = sys.executable
LITELLM_VENV = BENCH / ".litellm-venv"
LITELLM_BIN = LITELLM_VENV / "bin" / "litellm"

# `make serve` runs uvicorn without its access log since f065a06 (every request is a stored
# run); LiteLLM's CLI keeps its access log on, as it ships.
MORTAR_ACCESS_LOG = False
SERVER_CORE = "0"  # Mortar and LiteLLM
LOAD_CORE = "1"  # the mock, the load generators, this script
BENCH_DB = "mortar_bench_gateway"  # writer_bench.py uses mortar_bench
MODEL = "bench-model"
UPSTREAM_MODEL = "mock-model"
LITELLM_MASTER_KEY = "sk-bench-" + "litellm-master-key"
CHUNKS = 20
SLOW_DELAY_MS = 50
SLOW_RAMP_S = 3.0  # the slow streams open over this long, then all run at once
SYSTEM = "You are a concise assistant for an inference platform."
QUESTION = "What does max_tokens limit?"

TIMES, NONE = "\u00d7", "\u2013"  # the table's multiplication sign and en dash
QUIET_CPU_SHARE = 0.05  # a server is quiet below 5% of a core
QUIET_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # "wrk" | "slow" | "latency"
    stream: bool
    title: str
    connections: int = 1
    delay_ms: int = 0
    chunks: int = 20


SCENARIOS = [
    Scenario("json-32", "wrk", False, "non-streaming, 32 connections", connections=32),
    Scenario("stream-32", "wrk", True, "20-chunk streams, 32 connections", connections=32),
    Scenario(
        "slow-1000",
        "slow",
        True,
        f"1,000 concurrent streams, a chunk every {SLOW_DELAY_MS} ms",
        connections=1000,
        delay_ms=SLOW_DELAY_MS,
    ),
    Scenario("json-1", "latency", False, "non-streaming, one connection"),
    Scenario("stream-1", "latency", True, "20-chunk stream, one connection"),
]
TARGET_NAMES = ("direct", "mortar", "litellm")


# -- processes ----------------------------------------------------------------------------


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
    for pid in _session_pids(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _session_pids(sid: int) -> list[int]:
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


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (all their threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def core_busy_seconds() -> dict[str, float]:
    """Busy (non-idle) seconds of each CPU since boot, from /proc/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            numbers = [int(v) for v in values]
            busy[name] = (sum(numbers[:8]) - numbers[3] - numbers[4]) / tick  # minus idle, iowait
    return busy


def bench_db_backends() -> list[int]:
    """Postgres backends connected to the bench database (their title names it)."""
    found = []
    for pid in pids_named("postgres"):
        with contextlib.suppress(OSError):
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if f" {BENCH_DB} " in title:
                found.append(pid)
    return found


def pids_named(*names: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() in names:
                    found.append(int(entry.name))
    return found


def wait_http(url: str, started: Started, timeout: float) -> None:
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
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- set-up ---------------------------------------------------------------------------------


def ensure_tools() -> None:
    missing = [tool for tool in ("wrk", "taskset") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"missing {', '.join(missing)}: install with `apt-get install wrk util-linux`"
        )
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("the benchmark pins servers and load to two different cores: need 2")


def background_cpu(seconds: float = 2.0) -> float:
    """How many cores' worth of CPU the machine burns right now (before we start anything)."""
    before = core_busy_seconds()
    time.sleep(seconds)
    after = core_busy_seconds()
    return round(sum(after[k] - before[k] for k in after) / seconds, 2)


def wait_for_quiet_machine(limit_s: float) -> list[float]:
    """Wait (at most `limit_s`) until other processes use less than a fifth of a core: two
    cores leave no room for anyone else's load during a benchmark. Return the samples."""
    samples = []
    deadline = time.monotonic() + limit_s
    for _ in range(1000):
        samples.append(background_cpu())
        if samples[-1] < 0.2 or time.monotonic() >= deadline:
            break
        print(
            f"  the machine is busy ({samples[-1]:.2f} cores used by others); waiting …", flush=True
        )
        time.sleep(8)
    return samples


def ensure_litellm() -> None:
    """The LiteLLM proxy in its own virtual environment (bench/.litellm-venv, gitignored)."""
    if LITELLM_BIN.exists():
        return
    print("Installing the LiteLLM proxy into bench/.litellm-venv (about a minute) …", flush=True)
    base_python = getattr(sys, "_base_executable", None) or shutil.which("python3") or "python3"
    subprocess.run([base_python, "-m", "venv", str(LITELLM_VENV)], check=True, timeout=300)
    pip = str(LITELLM_VENV / "bin" / "pip")
    subprocess.run([pip, "install", "-q", "--upgrade", "pip"], check=True, timeout=600)
    subprocess.run([pip, "install", "-q", "litellm[proxy]"], check=True, timeout=1200)


def database_urls() -> tuple[str, str]:
    """The maintenance database to create the bench database from, and the bench database."""
    base = (
        os.environ.get("BENCH_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or "postgres://postgres@127.0.0.1:5432/postgres"
    )
    parts = urlsplit(base)
    admin = urlunsplit(parts._replace(path="/postgres"))
    return admin, urlunsplit(parts._replace(path=f"/{BENCH_DB}"))


def recreate_database(admin_url: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")


def drop_database(admin_url: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def base_env() -> dict[str, str]:
    """This environment without anything that would point a server at another database."""
    drop = ("DATABASE_URL", "REDIS_URL", "MORTAR_", "DJANGO_SETTINGS_MODULE", "LITELLM_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


@dataclass
class Target:
    name: str
    url: str  # the chat completions URL
    auth: str
    model: str
    server: Started | None  # the gateway's process (None for direct)


@dataclass
class Bench:
    tmp: Path
    mock: Started
    mortar: Started
    litellm: Started
    mortar_base: str
    redis_url: str
    redis_prefix: str
    bench_db_url: str
    targets: dict[str, Target] = field(default_factory=dict)


def start_everything(processes: Processes, tmp: Path) -> Bench:
    admin_url, bench_db_url = database_urls()
    redis_url = (
        os.environ.get("BENCH_REDIS_URL")
        or os.environ.get("REDIS_URL")
        or "redis://127.0.0.1:6379/0"
    )
    redis_prefix = f"mortar-bench-{secrets.token_hex(4)}"
    mock_port, mortar_port, litellm_port = free_port(), free_port(), free_port()
    mock_url = f"http://127.0.0.1:{mock_port}/v1"

    print(f"Database {BENCH_DB} (re-created), Redis prefix {redis_prefix}", flush=True)
    recreate_database(admin_url)
    secret = "mk-bench-" + secrets.token_hex(16)
    mortar_env = {
        **base_env(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": bench_db_url,
        "REDIS_URL": redis_url,
        "MORTAR_REDIS_PREFIX": redis_prefix,
        "MORTAR_VAR_DIR": str(tmp / "var"),
        "SECRET_KEY": "bench-only-secret-key-" + secrets.token_hex(8),
    }
    manage(mortar_env, "migrate", "--noinput")
    config = tmp / "mortar-bench.yaml"
    config.write_text(
        "deployments:\n"
        "  - name: bench-mock\n"
        f"    upstreams: ['{mock_url}']\n"
        f"    upstream_model: {UPSTREAM_MODEL}\n"
        "models:\n"
        f"  - id: {MODEL}\n"
        "    deployment: bench-mock\n"
        "    context_window: 32768\n"
        "organizations:\n"
        "  - name: bench\n"
    )
    manage(mortar_env, "applyconfig", str(config))
    manage(mortar_env, "createkey", "bench", "--name", "bench", "--secret", secret)

    mock = processes.start(
        "mock",
        [
            "taskset",
            "-c",
            LOAD_CORE,
            PYTHON,
            "-m",
            "mockmodel",
            "--host",
            "127.0.0.1",
            "--port",
            str(mock_port),
            "--chunks",
            str(CHUNKS),
        ],
        env=base_env(),
    )
    # As `make serve` runs it: uvicorn, uvloop, httptools, one worker, no access log.
    mortar = processes.start(
        "mortar",
        [
            "taskset",
            "-c",
            SERVER_CORE,
            PYTHON,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(mortar_port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--workers",
            "1",
            *([] if MORTAR_ACCESS_LOG else ["--no-access-log"]),
        ],
        env=mortar_env,
    )
    litellm_config = tmp / "litellm.yaml"
    litellm_config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{UPSTREAM_MODEL}\n"
        f"      api_base: {mock_url}\n"
        "      api_key: mock-needs-no-key\n"
        "general_settings:\n"
        f"  master_key: {LITELLM_MASTER_KEY}\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )
    litellm = processes.start(
        "litellm",
        [
            "taskset",
            "-c",
            SERVER_CORE,
            str(LITELLM_BIN),
            "--config",
            str(litellm_config),
            "--host",
            "127.0.0.1",
            "--port",
            str(litellm_port),
            "--num_workers",
            "1",
        ],
        env={
            **base_env(),
            # No network: use the cost map shipped in the wheel; no usage telemetry.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
        },
        cwd=tmp,
    )
    wait_http(f"http://127.0.0.1:{mock_port}/healthz", mock, 30)
    wait_http(f"http://127.0.0.1:{mortar_port}/healthz", mortar, 60)
    wait_http(f"http://127.0.0.1:{litellm_port}/health/liveliness", litellm, 180)
    bench = Bench(
        tmp=tmp,
        mock=mock,
        mortar=mortar,
        litellm=litellm,
        mortar_base=f"http://127.0.0.1:{mortar_port}",
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        bench_db_url=bench_db_url,
    )
    bench.targets = {
        "direct": Target("direct", f"{mock_url}/chat/completions", "", MODEL, None),
        "mortar": Target(
            "mortar", f"http://127.0.0.1:{mortar_port}/v1/chat/completions", secret, MODEL, mortar
        ),
        "litellm": Target(
            "litellm",
            f"http://127.0.0.1:{litellm_port}/v1/chat/completions",
            LITELLM_MASTER_KEY,
            MODEL,
            litellm,
        ),
    }
    return bench


def clean_redis(url: str, prefix: str) -> int:
    client = redis.Redis.from_url(url)
    removed = 0
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            removed += client.delete(*keys[start : start + 500])
    finally:
        client.close()
    return removed


# -- requests --------------------------------------------------------------------------------


def request_body(model: str, *, stream: bool, delay_ms: int = 0, chunks: int = CHUNKS) -> bytes:
    directive = f"[mock chunks={chunks}" + (f" delay_ms={delay_ms}" if delay_ms else "") + "]"
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"{QUESTION} {directive}"},
        ],
        "max_tokens": max(200, chunks + 64),
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def body_file(bench: Bench, target: Target, scenario: Scenario) -> Path:
    path = bench.tmp / f"body-{target.name}-{scenario.name}.json"
    if not path.exists():
        path.write_bytes(
            request_body(
                target.model,
                stream=scenario.stream,
                delay_ms=scenario.delay_ms,
                chunks=scenario.chunks,
            )
        )
    return path


def check_target(target: Target) -> None:
    """One request of each kind, checked: 200, twenty tokens, and a complete stream."""
    headers = {"Authorization": f"Bearer {target.auth}"} if target.auth else {}
    headers["Content-Type"] = "application/json"
    with httpx.Client(timeout=30) as client:
        reply = client.post(
            target.url, content=request_body(target.model, stream=False), headers=headers
        )
        if reply.status_code != 200:
            raise RuntimeError(f"{target.name}: {reply.status_code} {reply.text[:300]}")
        content = reply.json()["choices"][0]["message"]["content"]
        if content.count("tok") != CHUNKS:
            raise RuntimeError(f"{target.name}: unexpected reply {content!r}")
        if target.name == "mortar" and "X-Mortar-Run-Id" not in reply.headers:
            raise RuntimeError("mortar: no X-Mortar-Run-Id")
        body = request_body(target.model, stream=True)
        with client.stream("POST", target.url, content=body, headers=headers) as stream:
            text = stream.read().decode()
        if stream.status_code != 200:
            raise RuntimeError(f"{target.name}: stream {stream.status_code} {text[:300]}")
        events = [e for e in text.split("\n\n") if e.startswith("data: ")]
        tokens = sum(1 for e in events if '"content":"tok' in e or '"content":" tok' in e)
        if tokens != CHUNKS or events[-1] != "data: [DONE]":
            raise RuntimeError(f"{target.name}: stream with {tokens} tokens:\n{text[:2000]}")


# -- measuring -------------------------------------------------------------------------------


def server_cpu(bench: Bench) -> dict[str, float]:
    return {
        "mortar": cpu_seconds(_session_pids(bench.mortar.pid)),
        "litellm": cpu_seconds(_session_pids(bench.litellm.pid)),
        "mock": cpu_seconds(_session_pids(bench.mock.pid)),
        "postgres": cpu_seconds(bench_db_backends()),
        "redis": cpu_seconds(pids_named("redis-server")),
    }


def mortar_ready(bench: Bench) -> dict[str, Any]:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        return httpx.get(f"{bench.mortar_base}/readyz", timeout=5).json()
    return {}


def mock_in_flight(bench: Bench) -> int:
    url = bench.targets["direct"].url.replace("/v1/chat/completions", "/_mock/stats")
    with contextlib.suppress(httpx.HTTPError, ValueError):
        return int(httpx.get(url, timeout=5).json()["in_flight"])
    return -1


def wait_quiet(bench: Bench) -> float:
    """Wait (bounded) until the writer has drained, the mock is idle and no server burns CPU."""
    started = time.monotonic()
    deadline = started + QUIET_TIMEOUT_S
    for _ in range(10_000):
        if time.monotonic() >= deadline:
            print(f"    (not quiet after {QUIET_TIMEOUT_S:.0f}s; going on)", flush=True)
            break
        before = server_cpu(bench)
        time.sleep(0.3)
        after = server_cpu(bench)
        busy = max((after[k] - before[k]) / 0.3 for k in ("mortar", "litellm", "mock"))
        writer = mortar_ready(bench).get("run_writer", {})
        if busy < QUIET_CPU_SHARE and not writer.get("queue_depth") and mock_in_flight(bench) == 0:
            break
    return round(time.monotonic() - started, 2)


def wait_quiet_server(server: Started, *, seconds: float) -> None:
    """Wait (at most `seconds`) until one server stops burning CPU."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        before = cpu_seconds(_session_pids(server.pid))
        time.sleep(0.5)
        if cpu_seconds(_session_pids(server.pid)) - before < QUIET_CPU_SHARE * 0.5:
            return


def redis_commands(url: str) -> dict[str, int]:
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def pg_counters(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT sessions, xact_commit, tup_inserted, tup_updated"
            " FROM pg_stat_database WHERE datname = %s",
            (BENCH_DB,),
        ).fetchone()
    assert row is not None
    return dict(zip(("sessions", "xact_commit", "tup_inserted", "tup_updated"), row, strict=True))


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_wrk(target: Target, scenario: Scenario, bench: Bench, duration: float) -> dict[str, Any]:
    command = _load_command(target, scenario, bench, duration)
    env = {
        **os.environ,
        "BENCH_BODY_FILE": str(body_file(bench, target, scenario)),
        "BENCH_AUTH": target.auth,
    }
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=duration + 60)
    line = next((x for x in result.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{result.stdout}\n{result.stderr}")
    raw = json.loads(line.removeprefix("BENCH_JSON "))
    seconds = raw["duration_us"] / 1e6
    errors = raw["errors"]
    return {
        "requests": raw["requests"],
        "seconds": round(seconds, 3),
        "rps": round(raw["requests"] / seconds, 1),
        "errors": errors,
        "failed": sum(errors.values()),
        "latency_p50_ms": raw["latency_us"]["p50"] / 1000,
        "latency_p99_ms": raw["latency_us"]["p99"] / 1000,
        "latency_max_ms": raw["latency_us"]["max"] / 1000,
    }


def run_loadgen(
    target: Target, scenario: Scenario, bench: Bench, duration: float
) -> dict[str, Any]:
    command = [
        "taskset",
        "-c",
        LOAD_CORE,
        PYTHON,
        str(BENCH / "loadgen.py"),
        scenario.kind,
        "--url",
        target.url,
        "--body-file",
        str(body_file(bench, target, scenario)),
        "--duration",
        f"{duration:g}",
    ]
    if target.auth:
        command += ["--auth", target.auth]
    if scenario.kind == "slow":
        command += [
            "--connections", str(scenario.connections),
            "--ramp", f"{SLOW_RAMP_S:g}",
            "--tokens", str(scenario.chunks),
        ]  # fmt: skip
        command[command.index("--duration") + 1] = f"{scenario.chunks * scenario.delay_ms / 1000:g}"
    result = subprocess.run(command, capture_output=True, text=True, timeout=duration + 120)
    if result.returncode != 0:
        raise RuntimeError(f"loadgen failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(bench: Bench, target: Target, scenario: Scenario, duration: float) -> dict[str, Any]:
    quiet_s = wait_quiet(bench)
    pg_before = pg_counters(bench.bench_db_url)
    redis_before = redis_commands(bench.redis_url)
    cpu_before = server_cpu(bench)
    load_before = children_cpu()
    cores_before = core_busy_seconds()
    started = time.monotonic()
    if scenario.kind == "wrk":
        result = run_wrk(target, scenario, bench, duration)
    else:
        result = run_loadgen(target, scenario, bench, duration)
    wall = time.monotonic() - started
    load_cpu = children_cpu() - load_before
    cores_after = core_busy_seconds()
    cpu_after = server_cpu(bench)
    backlog = mortar_ready(bench).get("run_writer", {}) if target.name == "mortar" else {}
    pg_after = pg_counters(bench.bench_db_url)
    redis_after = redis_commands(bench.redis_url)
    cpu = {k: round(cpu_after[k] - cpu_before[k], 2) for k in cpu_before}
    result.update(
        wall_s=round(wall, 2),
        quiet_wait_s=quiet_s,
        cpu_s=cpu,
        loadgen_cpu_s=round(load_cpu, 2),
        core1_busy=round((cpu["mock"] + load_cpu) / wall, 2),
        # Whole-CPU utilization: more than the servers and the load explain means something
        # else on the machine competed (the numbers are then suspect).
        cores_busy={k: round((cores_after[k] - cores_before[k]) / wall, 2) for k in cores_after},
        unexplained_cpu_s=round(
            sum(cores_after[k] - cores_before[k] for k in cores_after)
            - sum(cpu.values())
            - load_cpu,
            2,
        ),
    )
    count = _request_count(result)
    if target.name == "mortar" and count:
        result["writer_after"] = backlog
        result["per_request"] = {
            "mortar_cpu_ms": round(cpu["mortar"] * 1000 / count, 3),
            "postgres_cpu_ms": round(cpu["postgres"] * 1000 / count, 3),
            "redis_cpu_ms": round(cpu["redis"] * 1000 / count, 3),
            "pg_sessions": round((pg_after["sessions"] - pg_before["sessions"]) / count, 4),
            "pg_rows_inserted": round(
                (pg_after["tup_inserted"] - pg_before["tup_inserted"]) / count, 2
            ),
            "redis_commands": {
                name: round((calls - redis_before.get(name, 0)) / count, 2)
                for name, calls in redis_after.items()
                if calls - redis_before.get(name, 0) >= count / 10
            },
        }
    elif target.name == "litellm" and count:
        result["per_request"] = {"litellm_cpu_ms": round(cpu["litellm"] * 1000 / count, 3)}
    return result


def _request_count(result: dict[str, Any]) -> int:
    if "rps" in result:
        return int(result["requests"])
    if result.get("mode") == "slow":
        # Streams counted in the window only; the CPU covers ramp-up and drain too.
        return 0
    return int(result.get("requests", 0))


# -- summarizing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    unit: str
    scenario: str
    read: Callable[[dict[str, Any]], float | None]
    higher_is_better: bool
    compare: str  # "ratio" or "added"


def _g(*path: str) -> Callable[[dict[str, Any]], float | None]:
    def read(result: dict[str, Any]) -> float | None:
        value: Any = result
        for part in path:
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        return None if value is None else float(value)

    return read


def _cpu_per_request(name: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda r: (r.get("per_request") or {}).get(f"{name}_cpu_ms")


METRICS = [
    Metric("json_rps", "Non-streaming, 32 conns", "req/s", "json-32", _g("rps"), True, "ratio"),
    Metric("json_p50", "  latency p50", "ms", "json-32", _g("latency_p50_ms"), False, "ratio"),
    Metric(
        "stream_rps",
        "20-chunk streams, 32 conns",
        "streams/s",
        "stream-32",
        _g("rps"),
        True,
        "ratio",
    ),
    Metric(
        "stream_p50",
        "  stream latency p50",
        "ms",
        "stream-32",
        _g("latency_p50_ms"),
        False,
        "ratio",
    ),
    Metric(
        "slow_gap_p50",
        "1,000 slow streams: token gap p50",
        "ms",
        "slow-1000",
        _g("token_gap", "p50_ms"),
        False,
        "added",
    ),
    Metric(
        "slow_gap_p99",
        "  token gap p99",
        "ms",
        "slow-1000",
        _g("token_gap", "p99_ms"),
        False,
        "added",
    ),
    Metric(
        "slow_gap_max",
        "  token gap max",
        "ms",
        "slow-1000",
        _g("token_gap", "max_ms"),
        False,
        "added",
    ),
    Metric(
        "slow_ttft_p50",
        "  time to first token p50",
        "ms",
        "slow-1000",
        _g("ttft", "p50_ms"),
        False,
        "added",
    ),
    Metric(
        "slow_streams",
        "  streams completed whole (of 1,000)",
        "",
        "slow-1000",
        _g("completed"),
        True,
        "ratio",
    ),
    Metric(
        "slow_stalled",
        "  streams stalled (gap > 1 s)",
        "",
        "slow-1000",
        _g("stalled"),
        False,
        "added",
    ),
    Metric(
        "slow_failed",
        "  streams failed or unfinished",
        "",
        "slow-1000",
        lambda r: float(r.get("failed", 0) + r.get("unfinished", 0)),
        False,
        "added",
    ),
    Metric(
        "one_json_p50",
        "One connection, non-streaming p50",
        "ms",
        "json-1",
        _g("total", "p50_ms"),
        False,
        "added",
    ),
    Metric("one_json_p99", "  p99", "ms", "json-1", _g("total", "p99_ms"), False, "added"),
    Metric(
        "one_stream_ttft",
        "One connection, stream: first token p50",
        "ms",
        "stream-1",
        _g("first", "p50_ms"),
        False,
        "added",
    ),
    Metric(
        "one_stream_p50",
        "  whole 20-chunk stream p50",
        "ms",
        "stream-1",
        _g("total", "p50_ms"),
        False,
        "added",
    ),
    Metric(
        "one_stream_p99",
        "  whole stream p99",
        "ms",
        "stream-1",
        _g("total", "p99_ms"),
        False,
        "added",
    ),
]


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """metric key -> target -> the median over rounds."""
    table: dict[str, dict[str, float | None]] = {}
    for metric in METRICS:
        table[metric.key] = {}
        for target in TARGET_NAMES:
            values = [
                v
                for run in runs
                if run["scenario"] == metric.scenario and run["target"] == target
                for v in [metric.read(run["result"])]
                if v is not None
            ]
            table[metric.key][target] = statistics.median(values) if values else None
    return table


def _fmt(value: float | None) -> str:
    if value is None:
        return NONE
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _compare(metric: Metric, mortar: float | None, other: float | None) -> str:
    if mortar is None or other is None:
        return NONE
    if metric.compare == "added":
        return f"{mortar - other:+.2f}" if abs(mortar - other) < 100 else f"{mortar - other:+,.0f}"
    if other == 0:
        return NONE
    return f"{mortar / other:.2f}{TIMES}" if mortar / other < 10 else f"{mortar / other:.1f}{TIMES}"


def cpu_table(runs: list[dict[str, Any]]) -> list[tuple[str, float | None, float | None]]:
    rows = []
    for scenario in ("json-32", "stream-32", "json-1", "stream-1"):
        values = {}
        for target, key in (("mortar", "mortar"), ("litellm", "litellm")):
            found = [
                run["result"]["per_request"][f"{key}_cpu_ms"]
                for run in runs
                if run["scenario"] == scenario
                and run["target"] == target
                and "per_request" in run["result"]
            ]
            values[target] = statistics.median(found) if found else None
        rows.append((scenario, values["mortar"], values["litellm"]))
    return rows


def targets_check(
    table: dict[str, dict[str, float | None]], runs: list[dict[str, Any]]
) -> list[tuple[str, str, str]]:
    def v(key: str, target: str) -> float | None:
        return table[key][target]

    checks = []

    def ratio_check(name: str, key: str, goal: float) -> None:
        m, lite = v(key, "mortar"), v(key, "litellm")
        if m is None or not lite:
            checks.append((name, "not measured", ""))
            return
        ratio = m / lite
        verdict = "met" if ratio >= goal else "NOT met"
        checks.append((name, verdict, f"{ratio:.1f}{TIMES} LiteLLM (goal ≥ {goal:g}{TIMES})"))

    def added_check(name: str, key: str, goal: float) -> None:
        m, d = v(key, "mortar"), v(key, "direct")
        if m is None or d is None:
            checks.append((name, "not measured", ""))
            return
        added = m - d
        verdict = "met" if added <= goal else "NOT met"
        miss = "" if added <= goal else f", {added - goal:.2f} ms over"
        checks.append((name, verdict, f"+{added:.2f} ms over direct (goal ≤ {goal:g} ms{miss})"))

    ratio_check(f"Non-streaming ≥ 10{TIMES} LiteLLM's req/s", "json_rps", 10)
    ratio_check(f"20-chunk streams ≥ 15{TIMES} LiteLLM's streams/s", "stream_rps", 15)
    added_check("Added p50 latency, non-streaming, one connection ≤ 2 ms", "one_json_p50", 2)
    added_check("Added p50 latency, whole 20-chunk stream ≤ 3 ms", "one_stream_p50", 3)
    # "None stalls" holds only if it holds in every round, not in the median one.
    bad = [
        run["result"]["stalled"] + run["result"]["failed"] + run["result"]["unfinished"]
        for run in runs
        if run["scenario"] == "slow-1000" and run["target"] == "mortar"
    ]
    if bad:
        checks.append(
            (
                "1,000 slow streams: none stalls",
                "met" if max(bad) == 0 else "NOT met",
                "stalled, failed or unfinished per round: " + ", ".join(str(b) for b in bad),
            )
        )
    else:
        checks.append(("1,000 slow streams: none stalls", "not measured", ""))
    added_check("1,000 slow streams: p99 added gap ≤ 10 ms", "slow_gap_p99", 10)
    return checks


def machine_info() -> dict[str, Any]:
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError):
        match = re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
        mem_kb = int(match.group(1)) if match else 0

    def version(python: str, package: str) -> str:
        with contextlib.suppress(Exception):
            return subprocess.run(
                [python, "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout.strip()
        return "?"

    git = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "git": git + (" (with uncommitted changes)" if any(dirty) else ""),
        "dirty_files": [line[3:] for line in dirty if line],
        "django": version(PYTHON, "django"),
        "uvicorn": version(PYTHON, "uvicorn"),
        "httpx": version(PYTHON, "httpx"),
        "litellm": version(str(LITELLM_VENV / "bin" / "python"), "litellm"),
        "wrk": (wrk_version.stdout + wrk_version.stderr).split("\n")[0].strip(),
    }


def render(report: dict[str, Any]) -> str:
    table = report["medians"]
    machine = report["machine"]
    lines = [
        "# Mortar benchmark",
        "",
        f"Run {report['finished_at']} — {report['rounds']} round(s) of "
        f"~{report['duration_s']:g} s per measurement, targets interleaved "
        f"({'quick smoke run' if report['quick'] else 'full run'}).",
        "",
        f"Machine: {machine['nproc']} CPUs ({machine['cpu_model']}), "
        f"{machine['memory_gib']} GiB memory, Linux {machine['kernel']}, Python "
        f"{machine['python']}; Mortar {machine['git']} (Django {machine['django']}, uvicorn "
        f"{machine['uvicorn']}), LiteLLM {machine['litellm']}, {machine['wrk']}.",
        "",
        "Mortar and LiteLLM: one worker each, pinned to core 0 (`taskset -c 0`). The mock model "
        "server, wrk and the asyncio load client: core 1. Postgres and Redis are not pinned. "
        "Mortar runs with everything on: auth, validation, token counting, optimizer in shadow "
        "mode, every chunk recorded in Postgres, telemetry events in Redis; uvicorn's access "
        f"log {'on' if report.get('mortar_access_log', True) else 'off'}, as `make serve` ran "
        "it then. LiteLLM as its CLI ships (access log on).",
        "",
        f"Other load on the machine when the run started: {report['background_cores_before']:.2f}"
        " cores. CPU time per measurement that neither the servers, Postgres, Redis nor the "
        f"load generators explain: median {report['unexplained_cores']:.2f} cores (kernel "
        "networking, other processes; per measurement in latest.json, `unexplained_cpu_s`).",
        "",
        f"Medians over rounds. Ratios ({TIMES}) compare rates or latencies; signed numbers are "
        "differences (Mortar - other).",
        "",
        "| Measure | unit | direct | Mortar | LiteLLM | Mortar vs direct | Mortar vs LiteLLM |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for metric in METRICS:
        row = table[metric.key]
        lines.append(
            f"| {metric.title} | {metric.unit} | {_fmt(row['direct'])} | {_fmt(row['mortar'])} "
            f"| {_fmt(row['litellm'])} | {_compare(metric, row['mortar'], row['direct'])} "
            f"| {_compare(metric, row['mortar'], row['litellm'])} |"
        )
    lines += [
        "",
        "CPU per request on core 0 (the gateway process, all its threads; median over rounds):",
        "",
        "| Scenario | Mortar ms | LiteLLM ms |",
        "| --- | ---: | ---: |",
    ]
    for scenario, mortar, litellm in report["cpu_per_request"]:
        lines.append(f"| {scenario} | {_fmt(mortar)} | {_fmt(litellm)} |")
    mortar_extra = report.get("mortar_per_request", {})
    if mortar_extra:
        lines += ["", "Mortar, per request (median over rounds):", ""]
        for scenario, values in mortar_extra.items():
            lines.append(f"- {scenario}: {json.dumps(values)}")
    lines += [
        "",
        "## Targets (issue 8)",
        "",
        "| Target | Verdict | Measured |",
        "| --- | --- | --- |",
    ]
    for name, verdict, detail in report["targets"]:
        lines.append(f"| {name} | {verdict} | {detail} |")
    recorded = report.get("recorded")
    if recorded:
        lines += [
            "",
            f"Recorded by Mortar during the run: {recorded['runs']:,} runs "
            f"({', '.join(f'{k} {v:,}' for k, v in recorded['by_status'].items())}), "
            f"{recorded['chunks']:,} chunk rows.",
        ]
    lines += [
        "",
        "Reproduce: `make bench` (or `.venv/bin/python bench/run.py --quick` for one short "
        "round). Raw numbers: bench/results/latest.json.",
        "",
    ]
    return "\n".join(lines)


def recorded_counts(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        by_status = dict(
            conn.execute("SELECT status, count(*) FROM telemetry_run GROUP BY status").fetchall()
        )
        chunks = conn.execute("SELECT count(*) FROM telemetry_runchunk").fetchone()
    return {
        "runs": sum(by_status.values()),
        "by_status": by_status,
        "chunks": chunks[0] if chunks else 0,
    }


def mortar_per_request(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for scenario in ("json-32", "stream-32"):
        found = [
            run["result"]["per_request"]
            for run in runs
            if run["target"] == "mortar"
            and run["scenario"] == scenario
            and "per_request" in run["result"]
        ]
        if not found:
            continue
        merged: dict[str, Any] = {}
        for key in (
            "mortar_cpu_ms",
            "postgres_cpu_ms",
            "redis_cpu_ms",
            "pg_sessions",
            "pg_rows_inserted",
        ):
            merged[key] = statistics.median(f[key] for f in found)
        commands: dict[str, list[float]] = {}
        for f in found:
            for name, value in f["redis_commands"].items():
                commands.setdefault(name, []).append(value)
        merged["redis_commands"] = {k: statistics.median(v) for k, v in sorted(commands.items())}
        out[scenario] = merged
    return out


# -- profiling ------------------------------------------------------------------------------


def profile_mortar(bench: Bench, scenarios: list[Scenario], duration: float) -> None:
    """Record py-spy profiles of Mortar under the throughput and slow-stream loads."""
    py_spy = shutil.which("py-spy") or str(Path(PYTHON).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy is not installed (.venv/bin/pip install py-spy): no profiles", flush=True)
        return
    target = bench.targets["mortar"]
    for scenario in scenarios:
        if scenario.name not in ("json-32", "stream-32", "slow-1000"):
            continue
        name = scenario.name
        for fmt, suffix in (("raw", "txt"), ("flamegraph", "svg")):
            wait_quiet(bench)
            output = RESULTS / f"profile-{name}.{suffix}"
            print(f"  profiling mortar {name} ({fmt}) → {output.relative_to(ROOT)}", flush=True)
            load_seconds = duration + 6
            load = subprocess.Popen(
                _load_command(target, scenario, bench, load_seconds),
                env={
                    **os.environ,
                    "BENCH_BODY_FILE": str(body_file(bench, target, scenario)),
                    "BENCH_AUTH": target.auth,
                },
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                time.sleep(4 if scenario.kind == "slow" else 2)  # past the ramp
                threads = _distinct_threads(bench.mortar.pid, seconds=2.0)
                subprocess.run(
                    [
                        "taskset",
                        "-c",
                        LOAD_CORE,
                        py_spy,
                        "record",
                        "--pid",
                        str(bench.mortar.pid),
                        "--duration",
                        f"{duration:g}",
                        "--rate",
                        "100",
                        "--format",
                        fmt,
                        "--output",
                        str(output),
                    ],
                    capture_output=True,
                    timeout=duration + 60,
                    check=False,
                )
                if fmt == "raw":
                    (RESULTS / f"profile-{name}.threads.json").write_text(json.dumps(threads))
            finally:
                if load.poll() is None:
                    os.killpg(load.pid, signal.SIGTERM)
                try:
                    load.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(load.pid, signal.SIGKILL)
                    load.wait(timeout=10)


def _load_command(target: Target, scenario: Scenario, bench: Bench, seconds: float) -> list[str]:
    if scenario.kind == "wrk":
        return [
            "taskset",
            "-c",
            LOAD_CORE,
            "wrk",
            "-t1",
            f"-c{scenario.connections}",
            f"-d{seconds:g}s",
            "--timeout",
            "10s",
            "-s",
            str(BENCH / "post.lua"),
            target.url,
        ]
    return [
        "taskset",
        "-c",
        LOAD_CORE,
        PYTHON,
        str(BENCH / "loadgen.py"),
        scenario.kind,
        "--url",
        target.url,
        "--body-file",
        str(body_file(bench, target, scenario)),
        "--auth",
        target.auth,
        "--duration",
        f"{seconds:g}",
        "--connections",
        str(scenario.connections),
        "--ramp",
        f"{SLOW_RAMP_S:g}",
        "--tokens",
        str(scenario.chunks),
    ]


def _distinct_threads(pid: int, *, seconds: float) -> dict[str, Any]:
    """How many distinct threads the process shows over a few seconds (thread churn)."""
    seen: set[str] = set()
    samples = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and samples < 10_000:
        with contextlib.suppress(OSError):
            seen.update(os.listdir(f"/proc/{pid}/task"))
        samples += 1
        time.sleep(0.005)
    alive = len(os.listdir(f"/proc/{pid}/task"))
    return {
        "seconds": seconds,
        "distinct_threads": len(seen),
        "alive_now": alive,
        "samples": samples,
    }


# -- main ----------------------------------------------------------------------------------


def rounds_of(targets: list[str], rounds: int) -> Iterator[tuple[int, list[str]]]:
    """Each round rotates the order, so no target always follows the same one."""
    for index in range(rounds):
        shift = index % len(targets)
        yield index, targets[shift:] + targets[:shift]


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark Mortar, LiteLLM and the mock.")
    parser.add_argument("--quick", action="store_true", help="one short round (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    parser.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also record py-spy profiles of Mortar (bench/results/profile-*)",
    )
    parser.add_argument("--profile-only", action="store_true", help="profiles, no table")
    parser.add_argument("--keep-db", action="store_true", help=f"keep {BENCH_DB} afterwards")
    parser.add_argument(
        "--render", type=Path, help="only re-render a results JSON into bench/results/latest.md"
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=300.0,
        help="seconds to wait at most for other load on the machine to stop",
    )
    args = parser.parse_args()
    if args.render:
        report = json.loads(args.render.read_text())
        report["medians"] = medians(report["runs"])
        report["cpu_per_request"] = cpu_table(report["runs"])
        report["mortar_per_request"] = mortar_per_request(report["runs"])
        report["targets"] = targets_check(report["medians"], report["runs"])
        (RESULTS / "latest.md").write_text(render(report))
        print(render(report))
        return
    if args.quick:
        args.rounds, args.duration = 1, 4.0
    # Slow streams last the ramp plus one measurement, so all of them overlap for its length.
    slow_chunks = int((SLOW_RAMP_S + args.duration) * 1000 / SLOW_DELAY_MS)
    scenarios = [
        dataclasses.replace(s, chunks=slow_chunks) if s.kind == "slow" else s
        for s in SCENARIOS
        if s.name in args.scenarios.split(",")
    ]

    ensure_tools()
    ensure_litellm()
    os.sched_setaffinity(0, {int(LOAD_CORE)})  # this script stays off the servers' core
    RESULTS.mkdir(exist_ok=True)
    LOGS.mkdir(exist_ok=True)
    # A plain `kill` should clean up like Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)

    background = wait_for_quiet_machine(args.wait_quiet)
    machine = machine_info()  # now: the code under test is what is checked out at the start
    processes = Processes()
    admin_url, _ = database_urls()
    bench: Bench | None = None
    started_at = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mortar-bench-") as tmp:
        try:
            bench = start_everything(processes, Path(tmp))
            for target in bench.targets.values():
                check_target(target)
            print("All three targets answer correctly; warming up …", flush=True)
            for target in bench.targets.values():
                for scenario in scenarios:
                    if scenario.kind == "wrk":
                        run_wrk(target, scenario, bench, 2)
            runs: list[dict[str, Any]] = []
            if not args.profile_only:
                for index, order in rounds_of(list(TARGET_NAMES), args.rounds):
                    for scenario in scenarios:
                        for name in order:
                            result = measure(bench, bench.targets[name], scenario, args.duration)
                            runs.append(
                                {
                                    "round": index,
                                    "scenario": scenario.name,
                                    "target": name,
                                    "result": result,
                                }
                            )
                            print(
                                f"round {index + 1} {scenario.name:<9} {name:<8} "
                                f"{_headline(result)}",
                                flush=True,
                            )
                wait_quiet(bench)
                report = {
                    "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "quick": args.quick,
                    "rounds": args.rounds,
                    "duration_s": args.duration,
                    "machine": machine,
                    "background_cores_before": background[-1],
                    "mortar_access_log": MORTAR_ACCESS_LOG,
                    "scenarios": [s.__dict__ for s in scenarios],
                    "runs": runs,
                    "medians": medians(runs),
                    "cpu_per_request": cpu_table(runs),
                    "mortar_per_request": mortar_per_request(runs),
                    "recorded": recorded_counts(bench.bench_db_url),
                    "elapsed_s": round(time.monotonic() - started_at, 1),
                }
                report["targets"] = targets_check(report["medians"], runs)
                report["unexplained_cores"] = statistics.median(
                    [run["result"]["unexplained_cpu_s"] / run["result"]["wall_s"] for run in runs]
                    or [0.0]
                )
                text = render(report)
                (RESULTS / "latest.md").write_text(text)
                raw = json.dumps(report, indent=1, default=str)
                (RESULTS / "latest.json").write_text(raw)
                stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
                (RESULTS / f"run-{stamp}.json").write_text(raw)
                print("\n" + text)
            if args.profile or args.profile_only:
                profile_mortar(bench, scenarios, 10.0 if not args.quick else 5.0)
        finally:
            processes.stop_all()
            if bench is not None:
                with contextlib.suppress(Exception):
                    clean_redis(bench.redis_url, bench.redis_prefix)
            if not args.keep_db:
                with contextlib.suppress(Exception):
                    drop_database(admin_url)
    print(f"Done in {time.monotonic() - started_at:.0f} s.", flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _headline(result: dict[str, Any]) -> str:
    if "rps" in result:
        text = f"{result['rps']:>9,.1f} req/s  p50 {result['latency_p50_ms']:.2f} ms"
        failed = result["failed"]
    elif result.get("mode") == "slow":
        gap = result["token_gap"]
        text = (
            f"{result['streams_per_s']:>8,.1f} streams/s  gap p50 {gap['p50_ms']} "
            f"p99 {gap['p99_ms']} max {gap['max_ms']} ms  stalled {result['stalled']}"
        )
        failed = result["failed"] + result["unfinished"]
    else:
        text = (
            f"{result['requests_per_s']:>8,.1f} req/s  first p50 {result['first']['p50_ms']} "
            f"ms  total p50 {result['total']['p50_ms']} ms  p99 {result['total']['p99_ms']} ms"
        )
        failed = result["failed"]
    cpu = result["cpu_s"]
    text += f"  [cpu mortar {cpu['mortar']} litellm {cpu['litellm']} core1 {result['core1_busy']}]"
    return text + (f"  FAILED {failed}" if failed else "")


if __name__ == "__main__":
    main()
