"""GET /metrics from `uvicorn --workers 2`: one consistent set, checked against what was sent."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import MOCK_UPSTREAM_KEY, Tenant, _server_env, wait_for_run
from tests.support.servers import ROOT, ServerProcess, free_port, wait_until_healthy
from tests.support.upstreams import MockPair

# Several worker processes need a shared backend (config/workers.py refuses them without
# Redis), so these run on Postgres and Redis only.
pytestmark = [pytest.mark.django_db, pytest.mark.redis]

TOKEN = "metrics-token-for-tests"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def two_workers(
    upstream_models: MockPair, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """Mortar as `uvicorn --workers 2`, with a var directory (and so metrics) of its own."""
    var_dir = tmp_path_factory.mktemp("two-workers-var")
    port = free_port()
    log_path = var_dir / "uvicorn.log"
    env = {
        **os.environ,
        **_server_env(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "MORTAR_VAR_DIR": str(var_dir),
        "MORTAR_METRICS_TOKEN": TOKEN,
        "MOCK_UPSTREAM_KEY": MOCK_UPSTREAM_KEY,
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # the default: a directory per server run
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "2",
            "--no-access-log",
        ],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    started = ServerProcess(process=process, port=port, log_path=log_path)
    server = wait_until_healthy(started, "uvicorn --workers 2", 60)
    yield server
    server.stop()


def scrape(server: ServerProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics by name and labels (a new connection: any worker answers)."""
    response = httpx.get(
        f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_need_the_token(two_workers: ServerProcess) -> None:
    url = f"{two_workers.base_url}/metrics"
    assert httpx.get(url).status_code == 401
    wrong = httpx.get(url, headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401
    assert wrong.headers["WWW-Authenticate"].startswith("Bearer")
    assert "mortar_" not in wrong.text


def test_two_workers_report_the_requests_sent(
    two_workers: ServerProcess, tenant: Tenant, priced_model: str
) -> None:
    before = scrape(two_workers)
    prompt = completion = 0
    workers: set[str] = set()
    sent_json = sent_streams = 0
    # New connections until both worker processes have served some (the kernel picks one per
    # connection), at least 6 of each kind.
    while len(workers) < 2 or sent_json < 6:
        with openai.OpenAI(
            base_url=f"{two_workers.base_url}/v1", api_key=tenant.secret, max_retries=0
        ) as client:
            if sent_json <= sent_streams:
                reply = client.chat.completions.create(
                    model=priced_model,
                    messages=[{"role": "user", "content": f"hello {sent_json}"}],
                    stream=False,
                )
                run_id = reply.id
                assert reply.usage is not None
                prompt += reply.usage.prompt_tokens
                completion += reply.usage.completion_tokens
                sent_json += 1
            else:
                stream = client.chat.completions.create(
                    model=priced_model,
                    messages=[{"role": "user", "content": f"stream {sent_streams}"}],
                    stream=True,
                    stream_options={"include_usage": True},
                )
                chunks = list(stream)
                run_id = chunks[0].id
                usage = chunks[-1].usage
                assert usage is not None
                prompt += usage.prompt_tokens
                completion += usage.completion_tokens
                sent_streams += 1
        workers.add(wait_for_run(run_id).worker)
        assert sent_json + sent_streams < 200, "one worker took every connection"
    refused = httpx.post(
        f"{two_workers.base_url}{CHAT}",
        json={"model": priced_model, "messages": []},
        headers={"Authorization": f"Bearer {tenant.secret}"},
    )
    assert refused.status_code == 400
    dead = httpx.post(
        f"{two_workers.base_url}{CHAT}",
        json={"model": "mock-dead", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {tenant.secret}", "Accept": "application/json"},
    )
    assert dead.status_code == 503
    assert dead.json()["error"]["code"] == "upstream_unavailable"

    sent = sent_json + sent_streams
    cost = Decimal(prompt) / 1_000_000 + Decimal(completion) * 2 / 1_000_000
    # Any worker answers the scrape with the same numbers: scrape a few times.
    for _ in range(4):
        after = scrape(two_workers)

        def delta(name: str, **labels: str) -> float:
            return value(after, name, **labels) - value(before, name, **labels)  # noqa: B023

        ok = {"route": CHAT, "model": priced_model, "status": "200"}
        assert delta("mortar_requests_total", **ok) == sent
        assert delta("mortar_requests_total", route=CHAT, model="", status="400") == 1
        assert delta("mortar_requests_total", route=CHAT, model="mock-dead", status="503") == 1
        assert delta("mortar_tokens_total", model=priced_model, kind="prompt") == prompt
        assert delta("mortar_tokens_total", model=priced_model, kind="completion") == completion
        assert delta("mortar_cost_usd_total", model=priced_model) == pytest.approx(float(cost))
        assert (
            delta(
                "mortar_upstream_errors_total", deployment="mock-dead", code="upstream_unavailable"
            )
            == 1
        )
        durations = delta("mortar_request_duration_seconds_count", route=CHAT, model=priced_model)
        assert durations == sent
        assert delta("mortar_time_to_first_token_seconds_count", model=priced_model) == sent
        assert value(after, "mortar_inflight_generations") == 0
        assert ("mortar_run_writer_queue_depth", frozenset()) in after
        assert ("mortar_run_writer_spooled_rows", frozenset()) in after


def test_each_run_gets_a_metrics_directory_of_its_own(two_workers: ServerProcess) -> None:
    # The workers' parent is uvicorn's supervisor: one directory, named after it, holds both.
    var_dir = Path(two_workers.log_path).parent
    directories = [d for d in (var_dir / "metrics").iterdir() if d.is_dir()]
    assert [d.name for d in directories] == [str(two_workers.process.pid)]
    markers = sorted(p.name for p in directories[0].glob("pid-*"))
    assert len(markers) == 2


def test_a_stream_in_flight_is_counted_until_it_ends(
    two_workers: ServerProcess, tenant: Tenant, slow_model: str
) -> None:
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST",
            f"{two_workers.base_url}{CHAT}",
            json={"model": slow_model, "messages": [{"role": "user", "content": "one two " * 6}]},
            headers={"Authorization": f"Bearer {tenant.secret}"},
        ) as response,
    ):
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")  # the role chunk: the run is open
        for _ in range(4):  # whichever worker answers the scrape sees it
            assert value(scrape(two_workers), "mortar_inflight_generations") == 1
        assert "data: [DONE]" in list(lines)
    assert value(scrape(two_workers), "mortar_inflight_generations") == 0
