"""The prompt optimizer through the whole API, to the mock model server and the run store."""

from __future__ import annotations

import json
import re

import httpx
import orjson
import pytest

from tests.conftest import Tenant, manage, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair, mock_requests, mock_reset

pytestmark = pytest.mark.django_db

PRETTY = json.dumps({"city": "Paris", "temp_c": 21.0, "sky": ["clear", "dry"]}, indent=2)
COMPACT = '{"city":"Paris","temp_c":21.0,"sky":["clear","dry"]}'
CONVERSATION = [
    {"role": "user", "content": "Weather? [mock usage=0 chunks=2]"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{ "city": "Paris" }'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": PRETTY},
]
REPORT = re.compile(
    r"ruleset=2; mode=(?P<mode>\w+); bytes=(?P<bytes>\d+); saved=(?P<saved>\d+); "
    r"passes=(?P<passes>[\w\-/,]*); elapsed_us=(?P<elapsed>\d+)"
)


@pytest.fixture(scope="module")
def optimizer_models(upstream_models: MockPair, tmp_path_factory) -> MockPair:
    url = MockPair.url(upstream_models.a)
    config = tmp_path_factory.mktemp("optimizer") / "optimizer.yaml"
    config.write_text(f"""
deployments:
  - name: optimizer-on
    upstreams: ["{url}"]
    optimizer: "on"
  - name: optimizer-shadow
    upstreams: ["{url}"]
models:
  - id: optimized
    deployment: optimizer-on
  - id: measured
    deployment: optimizer-shadow
""")
    manage("applyconfig", str(config))
    return upstream_models


def send(server: ServerProcess, tenant: Tenant, model: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps({"model": model, "messages": CONVERSATION, "stream": False}),
        headers={"Authorization": f"Bearer {tenant.secret}", **headers},
        timeout=30,
    )


def test_on_mode_sends_the_optimized_prompt_and_reports_it(
    mortar_server, tenant, optimizer_models
) -> None:
    mock_reset(optimizer_models.a)
    response = send(mortar_server, tenant, "optimized")
    assert response.status_code == 200

    [arrived] = mock_requests(optimizer_models.a)
    messages = arrived["body"]["messages"]
    assert messages[2]["content"] == COMPACT
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'
    assert messages[0]["content"] == CONVERSATION[0]["content"]  # user text is never rewritten

    report = REPORT.fullmatch(response.headers["X-Mortar-Optimizer"])
    assert report is not None
    saved = len(PRETTY) - len(COMPACT) + len('{ "city": "Paris" }') - len('{"city":"Paris"}')
    assert report["mode"] == "on"
    assert int(report["saved"]) == saved
    assert report["passes"] == "json-compact/2"

    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert run.optimizer_report["mode"] == "on"
    assert run.optimizer_report["saved"] == saved
    assert run.optimizer_report["bytes"] == int(report["bytes"])
    assert run.optimizer_report["passes"] == [{"name": "json-compact", "count": 2}]


def test_shadow_mode_sends_the_original_and_reports_what_it_would_save(
    mortar_server, tenant, optimizer_models
) -> None:
    mock_reset(optimizer_models.a)
    response = send(mortar_server, tenant, "measured")

    [arrived] = mock_requests(optimizer_models.a)
    assert arrived["body"]["messages"][2]["content"] == PRETTY
    assert arrived["body"]["messages"][1]["tool_calls"][0]["function"]["arguments"] == (
        '{ "city": "Paris" }'
    )
    report = REPORT.fullmatch(response.headers["X-Mortar-Optimizer"])
    assert report is not None and report["mode"] == "shadow"
    assert int(report["saved"]) > 0
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert run.optimizer_report["mode"] == "shadow"
    assert run.optimizer_report["saved"] == int(report["saved"])


def test_prompt_tokens_count_the_prompt_after_the_optimizer(
    mortar_server, tenant, optimizer_models
) -> None:
    optimized = send(mortar_server, tenant, "optimized").json()["usage"]["prompt_tokens"]
    measured = send(mortar_server, tenant, "measured").json()["usage"]["prompt_tokens"]
    assert optimized < measured


def test_off_in_the_request_sends_the_prompt_as_sent(mortar_server, tenant, optimizer_models):
    mock_reset(optimizer_models.a)
    response = send(mortar_server, tenant, "optimized", **{"X-Mortar-Optimize": "off"})
    assert response.headers["X-Mortar-Optimizer"] == "ruleset=2; mode=off"
    assert mock_requests(optimizer_models.a)[0]["body"]["messages"][2]["content"] == PRETTY
