"""POST /v1/chat/completions over HTTP: stream default, sessions, headers, context window."""

from __future__ import annotations

import re

import httpx
import orjson
import pytest

from tests.conftest import Tenant, wait_for_run
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

HELLO = [{"role": "user", "content": "Hello"}]


def post(
    server: ServerProcess, tenant: Tenant, body: dict, **headers: str | bytes
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {tenant.secret}", **headers},
        timeout=10,
    )


def test_it_streams_when_stream_is_left_out(mortar_server, tenant) -> None:
    response = post(mortar_server, tenant, {"messages": HELLO})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("data: [DONE]\n\n")


def test_it_answers_json_when_stream_is_left_out_and_accept_asks_for_json(
    mortar_server, tenant
) -> None:
    response = post(mortar_server, tenant, {"messages": HELLO}, Accept="application/json")
    assert response.headers["content-type"] == "application/json"
    assert response.json()["object"] == "chat.completion"


def test_an_explicit_stream_true_wins_over_accept(mortar_server, tenant) -> None:
    response = post(
        mortar_server, tenant, {"messages": HELLO, "stream": True}, Accept="application/json"
    )
    assert response.headers["content-type"].startswith("text/event-stream")


def test_accept_listing_event_stream_keeps_the_stream(mortar_server, tenant) -> None:
    response = post(
        mortar_server, tenant, {"messages": HELLO}, Accept="text/event-stream, application/json"
    )
    assert response.headers["content-type"].startswith("text/event-stream")


def test_the_session_header_is_sanitised(mortar_server, tenant) -> None:
    response = post(
        mortar_server,
        tenant,
        {"messages": HELLO, "stream": False, "user": "bob"},
        **{"X-Mortar-Session": ("conv 42/ü:a.b_c-d" + "x" * 200).encode()},
    )
    session = response.headers["X-Mortar-Session"]
    assert session == ("conv42:a.b_c-d" + "x" * 200)[:128]
    assert wait_for_run(response.headers["X-Mortar-Run-Id"]).session == session


def test_without_header_or_user_a_request_starts_its_own_session(mortar_server, tenant) -> None:
    first = post(mortar_server, tenant, {"messages": HELLO, "stream": False})
    second = post(mortar_server, tenant, {"messages": HELLO, "stream": False})
    assert first.headers["X-Mortar-Session"].startswith("sess_")
    assert first.headers["X-Mortar-Session"] != second.headers["X-Mortar-Session"]


def test_every_response_carries_the_mortar_headers(mortar_server, tenant) -> None:
    response = post(mortar_server, tenant, {"messages": HELLO, "stream": False})
    body = response.json()
    assert response.headers["X-Mortar-Request-Id"] == body["id"]
    assert response.headers["X-Mortar-Run-Id"] == body["id"]
    assert response.headers["X-Mortar-Deployment"] == "scripted"
    assert response.headers["X-Mortar-Model"] == "Qwen/Qwen2.5-7B-Instruct"
    # The scripted deployment is in the default `shadow` mode: measured, nothing changed.
    assert re.fullmatch(
        r"ruleset=2; mode=shadow; bytes=5; saved=0; passes=; elapsed_us=\d+",
        response.headers["X-Mortar-Optimizer"],
    )
    assert response.headers["X-Request-Id"].startswith("req_")
    assert "X-Mortar-Upstream" not in response.headers


def test_the_reply_is_derived_from_the_conversation(mortar_server, tenant) -> None:
    one = post(
        mortar_server,
        tenant,
        {"messages": [{"role": "user", "content": "Ping one"}], "stream": False},
    ).json()
    two = post(
        mortar_server,
        tenant,
        {"messages": [{"role": "user", "content": "Ping one"}], "stream": False},
    ).json()
    other = post(
        mortar_server,
        tenant,
        {"messages": [{"role": "user", "content": "Ping two"}], "stream": False},
    ).json()
    assert one["choices"][0]["message"] == two["choices"][0]["message"]
    assert one["choices"][0]["message"]["content"] != other["choices"][0]["message"]["content"]


def test_the_output_cap_is_lowered_to_fit_the_window(mortar_server, tenant) -> None:
    # "word " is one token; ~4,000 of them leave fewer than 1,024 tokens for the reply.
    long_prompt = [{"role": "user", "content": "word " * 3900}]
    response = post(mortar_server, tenant, {"messages": long_prompt, "stream": False})
    assert response.status_code == 200
    usage = response.json()["usage"]
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert run.max_tokens == 4096 - 32 - usage["prompt_tokens"]
    assert usage["completion_tokens"] <= run.max_tokens
    assert response.json()["choices"][0]["finish_reason"] == "length"


def test_a_named_tool_selection_keeps_only_that_tool(mortar_server, tenant) -> None:
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "description": "x" * 40}}
        for i in range(5)
    ]
    response = post(
        mortar_server,
        tenant,
        {
            "messages": HELLO,
            "stream": False,
            "tools": tools,
            "tool_choice": {"type": "function", "function": {"name": "tool_3"}},
        },
        **{"X-Mortar-Tool-Select": "named"},
    )
    assert response.status_code == 200
    report = response.headers["X-Mortar-Tool-Selector"]
    assert report.startswith("mode=named; tools=5->1; tokens=")
    before, after = report.split("tokens=")[1].split(";")[0].split("->")
    assert int(report.rsplit("saved=", 1)[1]) == int(before) - int(after) > 0
    calls = response.json()["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["tool_3"]
