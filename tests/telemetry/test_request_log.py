"""`MORTAR_LOG_FORMAT=json`: one JSON line per request in a real server process's log, with the
run's ids, organization, model, status, duration and tokens — never a key or message content."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.conftest import Tenant, _server_env, wait_for_run
from tests.support.servers import ServerProcess, start_mortar

pytestmark = pytest.mark.django_db

PROMPT = "a question nobody else asks: zebra quartz"


@pytest.fixture(scope="module")
def json_logging_server(mortar_server, tmp_path_factory) -> Iterator[ServerProcess]:
    env = {**_server_env(), "MORTAR_LOG_FORMAT": "json"}
    server = start_mortar(env, log_dir=tmp_path_factory.mktemp("json-log"))
    yield server
    server.stop()


def log_lines(server: ServerProcess) -> list[dict]:
    return [orjson.loads(line) for line in server.log().splitlines() if line.strip()]


def request_line(server: ServerProcess, run_id: str) -> dict:
    lines = [line for line in log_lines(server) if line.get("run_id") == run_id]
    assert len(lines) == 1, lines
    return lines[0]


def test_each_request_is_one_json_line(
    json_logging_server: ServerProcess, tenant: Tenant, priced_model: str
) -> None:
    base = json_logging_server.base_url
    headers = {"Authorization": f"Bearer {tenant.secret}", "X-Request-Id": "req-log-1"}
    body = {"model": priced_model, "messages": [{"role": "user", "content": PROMPT}]}
    answered = httpx.post(
        f"{base}/v1/chat/completions", json={**body, "stream": False}, headers=headers
    )
    assert answered.status_code == 200
    reply = answered.json()
    streamed = httpx.post(f"{base}/v1/chat/completions", json=body, headers=headers)
    refused = httpx.post(
        f"{base}/v1/chat/completions", json={**body, "temperature": 9}, headers=headers
    )
    assert refused.status_code == 400
    run_ids = [reply["id"], streamed.headers["X-Mortar-Run-Id"], refused.headers["X-Mortar-Run-Id"]]
    for run_id in run_ids:
        wait_for_run(run_id)

    line = request_line(json_logging_server, reply["id"])
    assert line["level"] == "INFO"
    assert line["logger"] == "mortar.requests"
    assert line["request_id"] == "req-log-1"
    assert line["organization"] == tenant.organization.name
    assert line["organization_id"] == tenant.organization.id
    assert line["route"] == "/v1/chat/completions"
    assert line["model"] == priced_model
    assert line["status"] == "completed"
    assert line["http_status"] == 200
    assert line["stream"] is False
    assert line["prompt_tokens"] == reply["usage"]["prompt_tokens"]
    assert line["completion_tokens"] == reply["usage"]["completion_tokens"]
    assert line["duration_ms"] > 0
    assert line["ttft_ms"] is not None and line["ttft_ms"] <= line["duration_ms"]

    stream_line = request_line(json_logging_server, run_ids[1])
    assert stream_line["stream"] is True
    assert stream_line["status"] == "completed"
    refused_line = request_line(json_logging_server, run_ids[2])
    assert refused_line["status"] == "refused"
    assert refused_line["http_status"] == 400
    assert refused_line["error_code"] == "invalid_parameter"

    # Never a key, the prompt or the reply; and every line of the log is JSON.
    log = json_logging_server.log()
    assert tenant.secret not in log
    assert "zebra quartz" not in log
    assert reply["choices"][0]["message"]["content"] not in log
    assert all(isinstance(line, dict) for line in log_lines(json_logging_server))


def test_the_plain_format_has_no_request_lines(mortar_server: ServerProcess, tenant) -> None:
    response = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "stream": False},
        headers={"Authorization": f"Bearer {tenant.secret}"},
    )
    run_id = response.json()["id"]
    wait_for_run(run_id)
    assert run_id not in mortar_server.log()
