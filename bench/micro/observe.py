"""Measure what observing costs a request: CPU µs per request, budget ≤ 50 µs for the metrics,
and the price of the JSON log line, tracing and CORS when nobody uses them.

Each case calls, in this process, what the server calls for one request, many times over, and
reports the process's CPU time per request (the best of three rounds):

- metrics: the run opened (the inflight gauge) and closed (`telemetry.metrics.run_closed`: the
  request counter, the duration and first-token histograms, three token counters and the cost)
  in prometheus-client's multiprocess mode, in a temporary directory, as the server records them;
- request log, plain: the check `MORTAR_LOG_FORMAT` costs when the line is off (the default);
- request log, json: the line formatted and written (to /dev/null);
- tracing off: the calls the pipeline makes for one streamed request (`step` six times, `annotate`,
  `span_started`, `inject_trace`) when no OTLP endpoint is set;
- CORS, no Origin: the wrapper's scan of a request's headers (every SDK outside a browser);
- CORS, Origin: the same with the allow-origin and expose headers added to the answer.

The run fails (exit 1) when the metrics are over budget.

    .venv/bin/python -m bench micro observe [--requests 100000]

Writes bench/results/observe.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from decimal import Decimal

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="mortar-metrics-bench-")

import django

django.setup()

from django.conf import settings  # noqa: E402

from bench.commands import program  # noqa: E402
from bench.harness.results import recorded  # noqa: E402
from core import tracing  # noqa: E402
from core.http.asgi import Receive, Scope, Send  # noqa: E402
from core.http.cors import Cors  # noqa: E402
from core.logs import JsonFormatter  # noqa: E402
from gateway.contract import cors as api_cors  # noqa: E402
from telemetry import metrics, request_log  # noqa: E402
from telemetry.store.fields import RunFields  # noqa: E402

BUDGET_US = 50.0
MODEL = "Qwen/Qwen2.5-7B-Instruct"
RUN: RunFields = {
    "id": "chatcmpl-0123456789abcdef01234567",
    "accepted_at": datetime.now(UTC),
    "organization_id": 1,
    "request_id": "0123456789abcdef",
    "model": MODEL,
    "deployment": "vllm",
    "stream": True,
    "status": "completed",
    "http_status": 200,
    "prompt_tokens": 32,
    "completion_tokens": 13,
    "cached_tokens": 16,
    "usage": {"prompt_tokens": 32, "completion_tokens": 13, "total_tokens": 45},
    "usage_source": "upstream",
    "cost": Decimal("0.000058"),
}
HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    (b"user-agent", b"OpenAI/Python 1.99.0"),
    (b"accept", b"application/json"),
    (b"content-type", b"application/json"),
    (b"authorization", b"Bearer mk-0000"),
    (b"x-stainless-os", b"Linux"),
    (b"x-stainless-lang", b"python"),
    (b"content-length", b"120"),
]


def cpu_us(fn: Callable[[], None], requests: int) -> float:
    """CPU µs per call of `fn`, the best of three rounds."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(requests):
            fn()
        best = min(best, time.process_time() - started)
    return best / requests * 1_000_000


def record_metrics() -> None:
    metrics.run_opened()
    metrics.run_closed(
        RUN, route="/v1/chat/completions", seconds=0.0421, first_token_seconds=0.0013, opened=True
    )


def log_line() -> None:
    request_log.request_logged(
        RUN, route="/v1/chat/completions", organization="acme", seconds=0.0421,
        first_token_seconds=0.0013,
    )  # fmt: skip


def traced_off() -> None:
    for name in ("auth", "validate", "plan", "dedupe", "upstream first byte", "record"):
        with tracing.step(name):
            pass
    tracing.annotate(run_id="chatcmpl-0", organization="acme")
    tracing.span_started("relay").end()
    tracing.inject_trace({})


def cors_case(origin: bool, requests: int) -> float:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def receive() -> Mapping[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Mapping[str, object]) -> None:
        pass

    cors = Cors(
        app,
        ["*"],
        allow_headers=api_cors.REQUEST_HEADERS,
        allow_header_prefixes=api_cors.REQUEST_HEADER_PREFIXES,
        expose_headers=api_cors.RESPONSE_HEADERS,
    )
    headers = [*HEADERS, (b"origin", b"http://app.example")] if origin else HEADERS
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}

    async def bare() -> None:
        for _ in range(requests):
            await app(scope, receive, send)

    async def wrapped() -> None:
        for _ in range(requests):
            await cors(scope, receive, send)

    def timed(coro: Callable[[], Coroutine[object, object, None]]) -> float:
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            asyncio.run(coro())
            best = min(best, time.process_time() - started)
        return best

    return (timed(wrapped) - timed(bare)) / requests * 1_000_000


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=program(__name__), description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    requests: int = parser.parse_args(argv).requests

    metrics.metrics()  # made once, as at a worker's start
    results = {"metrics (multiprocess)": cpu_us(record_metrics, requests)}
    settings.MORTAR_LOG_FORMAT = "plain"
    results["request log, plain (off)"] = cpu_us(log_line, requests)
    settings.MORTAR_LOG_FORMAT = "json"
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115
    handler.setFormatter(JsonFormatter())
    logger = request_log.logger
    logger.handlers, logger.propagate = [handler], False
    results["request log, json"] = cpu_us(log_line, requests // 10)
    results["tracing off"] = cpu_us(traced_off, requests)
    results["CORS, no Origin"] = cors_case(False, requests)
    results["CORS, Origin"] = cors_case(True, requests)

    with recorded("observe", "What observing costs a request"):
        print(f"{requests:,} requests a case (the JSON log line: a tenth), best of three rounds")
        print("| case | CPU µs per request |\n| --- | ---: |")
        for name, value in results.items():
            print(f"| {name} | {value:.2f} |")
        over = results["metrics (multiprocess)"] > BUDGET_US
        if over:
            print(f"metrics over budget: {BUDGET_US} µs")
    if over:
        sys.exit(1)
