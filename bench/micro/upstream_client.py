"""Measure what one request to a model server costs the gateway's client, candidates side by side.

Each candidate sends the same streaming chat request to the mock model server (one chunk of
content, then the usage and `[DONE]`), reads the reply to its end and closes it, one request at a
time on one keep-alive connection, in a process of its own (Django set up, and the garbage
collector tuned as a server's) on uvloop:

- `mortar`: `gateway.upstream.client` as it is (`open_stream`, `chunks()`, `aclose()`): httpx's
  client, the chat request built from the client's merged headers, Mortar's transport over
  aiohttp (`gateway/upstream/transport.py`), the reply read and closed on aiohttp's response;
- `httpx`: httpx's own transport (httpcore's pool), the reply read with `aiter_raw()`;
- `aiohttp`: aiohttp's session alone, nothing parsed: the floor under the others.

Two measures: CPU µs a request (the process's user + system time over `--requests`, the median
of `--rounds` interleaved rounds: it moves with the host's other tenants), and with
`--instructions` the instructions a request under callgrind (the difference between a run of
`--requests` and one of 100, so start-up and warm-up cancel out: it repeats to within a
percent). The mock runs on core 1 and each candidate on core 0 where there are two.

    .venv/bin/python -m bench micro upstream-client [--requests 3000] [--rounds 5] [--instructions]

Writes bench/results/upstream-client.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from bench.commands import program

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PYTHON = sys.executable
CANDIDATES = ("mortar", "httpx", "aiohttp")
# Each candidate in a process of its own: `python -m bench micro upstream-client --worker …`.
WORKER = ["-m", "bench", "micro", "upstream-client", "--worker"]
BODY = (
    b'{"model":"mock","messages":[{"role":"user","content":"Hi [mock chunks=1]"}],'
    b'"max_tokens":20,"stream":true,"stream_options":{"include_usage":true}}'
)
WARM_UP = 200
BASELINE_REQUESTS = 100  # the callgrind run whose count is taken away


def pinned(core: int) -> list[str]:
    """`taskset -c core` where there is such a core and taskset, else nothing."""
    if shutil.which("taskset") and (os.cpu_count() or 1) > core:
        return ["taskset", "-c", str(core)]
    return []


# -- the candidates, each in its own process ---------------------------------------------------


def one_request(
    candidate: str, base_url: str
) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    """A function sending one request the candidate's way, and what to close at the end."""
    import aiohttp
    import httpx

    if candidate == "mortar":
        from gateway.upstream.client import ReplicaConfig, close_clients, open_stream

        config = ReplicaConfig(
            base_url=base_url, name="mock", api_key="sk-bench", connect_timeout=5, read_timeout=30
        )

        async def mortar() -> None:
            stream = await open_stream(config, BODY)
            try:
                async for _ in stream.chunks():
                    pass
            finally:
                await stream.aclose()

        return mortar, close_clients

    if candidate == "httpx":
        from gateway.upstream.client import NoCookies, _json, completions_url
        from gateway.upstream.event_data import EventData

        plain = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": "Bearer sk-bench"},
            timeout=httpx.Timeout(connect=5, read=30, write=5, pool=5),
            cookies=NoCookies(),
        )
        url = completions_url(base_url)

        async def via_httpx() -> None:
            headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
            request = plain.build_request("POST", url, content=BODY, headers=headers)
            response = await plain.send(request, stream=True)
            try:
                events = EventData()
                async for piece in response.aiter_raw():
                    for data in events.feed(piece):
                        if data != b"[DONE]":
                            _json(data)
            finally:
                await response.aclose()

        return via_httpx, plain.aclose

    assert candidate == "aiohttp"
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
    )
    target = f"{base_url}/chat/completions"
    timeout = aiohttp.ClientTimeout(sock_connect=5, sock_read=30, connect=5)
    headers = {
        "Authorization": "Bearer sk-bench",
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
    }

    async def via_aiohttp() -> None:
        response = await session.post(target, data=BODY, headers=headers, timeout=timeout)
        while await response.content.readany():
            pass
        response.release()

    return via_aiohttp, session.close


async def drive(candidate: str, base_url: str, requests: int) -> float:
    send, close = one_request(candidate, base_url)
    try:
        for _ in range(WARM_UP):
            await send()
        started = time.process_time()
        for _ in range(requests):
            await send()
        return time.process_time() - started
    finally:
        await close()


def worker(candidate: str, base_url: str, requests: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django
    import uvloop

    django.setup()
    from django.conf import settings

    # As a server does after start-up (config/asgi.py: tune_garbage_collector): with Python's
    # default threshold the young collections would be counted too, in proportion to what each
    # candidate allocates.
    gc.collect()
    gc.freeze()
    if settings.MORTAR_GC_YOUNG_THRESHOLD > 0:
        _, middle, old = gc.get_threshold()
        gc.set_threshold(settings.MORTAR_GC_YOUNG_THRESHOLD, middle, old)
    seconds = uvloop.run(drive(candidate, base_url, requests))
    print(f"cpu_us_per_request={seconds / requests * 1e6:.2f}")


# -- the parent: the mock, the rounds, the table ----------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def mock_model_server() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [*pinned(1), PYTHON, "-m", "mockmodel", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit("the mock model server did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(10)


def cpu_per_request(candidate: str, base_url: str, requests: int) -> float:
    out = subprocess.run(
        [*pinned(0), PYTHON, *WORKER, candidate, base_url, str(requests)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"cpu_us_per_request=([\d.]+)", out)
    assert match, out
    return float(match.group(1))


def instructions(candidate: str, base_url: str, requests: int) -> int:
    out = subprocess.run(
        [
            *pinned(0),
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            PYTHON,
            *WORKER,
            candidate,
            base_url,
            str(requests),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    match = re.search(r"Collected : (\d+)", out)
    assert match, out[-2000:]
    return int(match.group(1))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--instructions", action="store_true", help="also count under callgrind")
    parser.add_argument("--worker", nargs=3, metavar=("CANDIDATE", "BASE_URL", "REQUESTS"))
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], args.worker[1], int(args.worker[2]))
        return
    if args.instructions and not shutil.which("valgrind"):
        raise SystemExit("--instructions needs valgrind (apt-get install -y valgrind)")

    cpu: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    counted: dict[str, float] = {}
    with mock_model_server() as base_url:
        for round_number in range(1, args.rounds + 1):
            for name in CANDIDATES:
                cpu[name].append(cpu_per_request(name, base_url, args.requests))
            print(f"round {round_number}: " + ", ".join(f"{n} {cpu[n][-1]:.0f} µs" for n in cpu))
        if args.instructions:
            requests = max(args.requests // 3, BASELINE_REQUESTS + 100)
            for name in CANDIDATES:
                many = instructions(name, base_url, requests)
                few = instructions(name, base_url, BASELINE_REQUESTS)
                counted[name] = (many - few) / (requests - BASELINE_REQUESTS)
                print(f"{name}: {counted[name] / 1000:.0f} k instructions a request")

    lines = [
        "# One request to a model server, the client's cost (`bench/micro/upstream_client.py`)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.requests} requests a "
        f"round, {args.rounds} rounds interleaved; a streamed reply of one content chunk, its "
        "usage and `[DONE]` from the mock model server, one connection.",
        "",
        "| Candidate | CPU µs a request (median; min to max) | instructions a request |",
        "| --- | ---: | ---: |",
    ]
    for name in CANDIDATES:
        values = cpu[name]
        count = f"{counted[name] / 1000:,.0f} k" if name in counted else "not counted"
        lines.append(
            f"| {name} | {statistics.median(values):.0f} ({min(values):.0f} to {max(values):.0f})"
            f" | {count} |"
        )
    report = "\n".join(lines) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "upstream-client.md").write_text(report)
    print(report)
