"""Forwarding to model servers: the OpenAI SDK through Mortar to the mock vLLM server."""

from __future__ import annotations

import json

import httpx
import openai
import orjson
import pytest

from tests.conftest import MOCK_UPSTREAM_KEY, Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair, mock_requests, mock_reset, mock_stats

pytestmark = pytest.mark.django_db

# What may reach a model server: the fields Mortar checks (messages, tools, the output cap, the
# sampling fields), plus Mortar's own transport fields.
ALLOWED_UPSTREAM_FIELDS = {
    "model",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "response_format",
    "logprobs",
    "top_logprobs",
    "stream",
    "stream_options",
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
MOCK_REPLY = (
    "tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 tok9 "
    "tok10 tok11 tok12 tok13 tok14 tok15 tok16 tok17 tok18 tok19"
)


@pytest.fixture
def client(mortar_server: ServerProcess, tenant: Tenant) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{mortar_server.base_url}/v1", api_key=tenant.secret, max_retries=0
    )


def post(server: ServerProcess, tenant: Tenant, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {tenant.secret}", **headers},
        timeout=30,
    )


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def sse_events(text: str) -> list[str]:
    return [event for event in text.split("\n\n") if event]


def test_a_plain_call_reaches_the_model_server_with_only_the_allowed_fields(
    client: openai.OpenAI, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    raw = client.chat.completions.with_raw_response.create(
        model="mock-one",
        messages=[{"role": "developer", "content": "Be brief."}, *ask("Hello there")],
        temperature=0.5,
        max_tokens=50,
        user="end-user-7",
        extra_body={
            "metadata": {"a": 1},
            "store": True,
            "logit_bias": {"1": 2},
            "foo": "bar",
            "top_k": 5,
            "n": 1,
        },
    )
    completion = raw.parse()

    assert completion.choices[0].message.content == MOCK_REPLY.replace(" tok", " tok")
    assert completion.model == "mock-one"
    assert completion.id == raw.headers["X-Mortar-Request-Id"]
    # The replica's name, never its URL (an internal address is
    # not the client's to know); the stored run keeps the URL for operators.
    assert raw.headers["X-Mortar-Upstream"] == "mock-one/0"
    assert raw.headers["X-Mortar-Deployment"] == "mock-one"

    [arrived] = mock_requests(upstream_models.a)
    body = arrived["body"]
    assert set(body) <= ALLOWED_UPSTREAM_FIELDS
    assert body["model"] == "mock-upstream-name"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]
    assert body["temperature"] == 0.5
    assert body["max_tokens"] == 50
    assert body["stream"] is True
    headers = {name.lower(): value for name, value in arrived["headers"].items()}
    assert headers["authorization"] == f"Bearer {MOCK_UPSTREAM_KEY}"
    assert not any(name.startswith("x-mortar") or name == "x-request-id" for name in headers)

    run = wait_for_run(completion.id)
    assert run.status == "completed"
    assert run.replica == MockPair.url(upstream_models.a)
    assert json.loads(bytes(run.upstream_request)) == body


def test_a_streaming_call_is_relayed_under_mortars_id_with_upstream_usage(
    client: openai.OpenAI, upstream_models: MockPair
) -> None:
    stream = client.chat.completions.create(
        model="mock-one",
        messages=ask("Hi [mock chunks=5 cached=7]"),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    ids = {chunk.id for chunk in chunks}
    assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-")
    assert {chunk.model for chunk in chunks} == {"mock-one"}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].delta.content for c in chunks[1:6]] == [
        "tok0",
        " tok1",
        " tok2",
        " tok3",
        " tok4",
    ]
    assert chunks[6].choices[0].finish_reason == "stop"
    assert chunks[6].choices[0].delta is None
    usage = chunks[7].usage
    assert chunks[7].choices == []
    assert usage.completion_tokens == 5
    assert usage.prompt_tokens_details.cached_tokens == 7

    run = wait_for_run(chunks[0].id)
    assert run.usage_source == "upstream"
    assert run.usage == usage.model_dump(exclude_none=True)
    assert run.usage["prompt_tokens_details"] == {"cached_tokens": 7}
    assert run.completion_tokens == 5
    assert run.prompt_tokens == usage.prompt_tokens


def test_a_non_streaming_call_returns_upstream_usage_unchanged(
    mortar_server, tenant, upstream_models
) -> None:
    response = post(
        mortar_server,
        tenant,
        {"model": "mock-one", "messages": ask("Hi [mock chunks=3 cached=11]"), "stream": False},
    )
    body = response.json()
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 11}
    assert body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["message"]["content"] == "tok0 tok1 tok2"
    assert wait_for_run(body["id"]).usage_source == "upstream"


def test_a_full_tool_loop_through_the_model_server(
    client: openai.OpenAI, upstream_models: MockPair
) -> None:
    first = client.chat.completions.create(
        model="mock-one", messages=ask("Weather in Paris?"), tools=[WEATHER_TOOL]
    )
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    streamed = list(
        client.chat.completions.create(
            model="mock-one", messages=ask("Weather in Paris?"), tools=[WEATHER_TOOL], stream=True
        )
    )
    pieces = [c.choices[0].delta.tool_calls[0] for c in streamed[1:-1]]
    assert pieces[0].id == pieces[0].id and pieces[0].function.name == "get_weather"
    assert "".join(p.function.arguments or "" for p in pieces) == '{"city": "Paris"}'
    assert streamed[-1].choices[0].finish_reason == "tool_calls"

    second = client.chat.completions.create(
        model="mock-one",
        messages=[
            *ask("Weather in Paris?"),
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "21 C"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content.startswith("tok0")


def test_reasoning_passes_through(mortar_server, tenant, upstream_models) -> None:
    streamed = post(
        mortar_server, tenant, {"model": "mock-one", "messages": ask("[mock reasoning=2 chunks=1]")}
    )
    events = [json.loads(e[6:]) for e in sse_events(streamed.text) if e != "data: [DONE]"]
    assert [e["choices"][0]["delta"] for e in events[1:4]] == [
        {"reasoning_content": "think0 "},
        {"reasoning_content": "think1 "},
        {"content": "tok0"},
    ]
    whole = post(
        mortar_server,
        tenant,
        {"model": "mock-one", "messages": ask("[mock reasoning=2 chunks=1]"), "stream": False},
    ).json()
    assert whole["choices"][0]["message"] == {
        "role": "assistant",
        "content": "tok0",
        "reasoning_content": "think0 think1 ",
    }


@pytest.mark.parametrize(
    ("model", "directive", "status", "code"),
    [
        ("mock-one", "[mock fault=error500]", 502, "upstream_error"),
        ("mock-one", "[mock fault=garbage]", 502, "upstream_error"),
        ("mock-one", "[mock fault=hang]", 504, "upstream_timeout"),
        ("mock-one", "[mock fault=reset]", 503, "upstream_unavailable"),
        ("mock-dead", "", 503, "upstream_unavailable"),
    ],
    ids=["500", "garbage", "hang", "reset", "unreachable"],
)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_a_fault_before_the_first_byte_gets_its_status(
    mortar_server, tenant, upstream_models, model, directive, status, code, stream
) -> None:
    response = post(
        mortar_server,
        tenant,
        {"model": model, "messages": ask(f"Hi {directive}"), "stream": stream},
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == "upstream_error"
    assert "127.0.0.1" not in response.text  # no model server's address
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.status, run.http_status, run.error_code) == ("failed", status, code)
    assert stored_bytes(run) == response.content


def test_an_upstream_4xx_keeps_its_status_and_message(mortar_server, tenant, upstream_models):
    response = post(
        mortar_server, tenant, {"model": "mock-one", "messages": ask("[mock fault=error400]")}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == "top_k must be -1 or at least 1, got 0."
    assert error["code"] == "upstream_error"
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.status, run.http_status) == ("refused", 400)


@pytest.mark.parametrize(
    ("model", "directive", "code"),
    [
        ("mock-one", "[mock fault=drop chunks=10]", "upstream_error"),
        ("mock-one", "[mock fault=garbage_late]", "upstream_error"),
        ("mock-one", "[mock chunks=4 delay_ms=2500]", "upstream_timeout"),  # > 1.5 s between
    ],
    ids=["drop", "garbage-late", "drip-past-the-chunk-timeout"],
)
def test_a_fault_after_the_stream_started_ends_it_with_one_error_event(
    mortar_server, tenant, upstream_models, model, directive, code
) -> None:
    response = post(mortar_server, tenant, {"model": model, "messages": ask(f"Hi {directive}")})
    assert response.status_code == 200
    events = sse_events(response.text)
    assert "data: [DONE]" not in events
    last = json.loads(events[-1].removeprefix("data: "))
    assert last["error"]["type"] == "upstream_error"
    assert last["error"]["code"] == code
    if code == "upstream_timeout":
        assert last["error"]["message"] == "The model server took too long between chunks."
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.status, run.error_code) == ("failed", code)
    assert stored_bytes(run) == response.content


def test_a_mid_stream_fault_fails_a_json_request_with_502(mortar_server, tenant, upstream_models):
    response = post(
        mortar_server,
        tenant,
        {"model": "mock-one", "messages": ask("[mock fault=drop chunks=10]"), "stream": False},
    )
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_error"


def test_an_upstream_that_runs_on_is_cut_at_three_times_max_tokens_plus_64(
    mortar_server, tenant, upstream_models
) -> None:
    mock_reset(upstream_models.a)
    response = post(
        mortar_server,
        tenant,
        {
            "model": "mock-one",
            "messages": ask("[mock fault=runon]"),
            "max_tokens": 10,
            "stream_options": {"include_usage": True},
        },
    )
    events = sse_events(response.text)
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-3][6:])["choices"][0]["finish_reason"] == "length"
    usage = json.loads(events[-2][6:])["usage"]
    assert 3 * 10 + 64 - 3 <= usage["completion_tokens"] <= 3 * 10 + 64
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.finish_reason, run.usage_source) == ("length", "estimate")
    assert run.completion_tokens == usage["completion_tokens"]
    assert mock_stats(upstream_models.a)["cancelled"] == 1  # the model server was stopped


def test_without_upstream_usage_mortar_estimates(mortar_server, tenant, upstream_models) -> None:
    response = post(
        mortar_server,
        tenant,
        {"model": "mock-one", "messages": ask("[mock usage=0 chunks=3]"), "stream": False},
    )
    usage = response.json()["usage"]
    from gateway.tokens import default_counter

    assert usage["completion_tokens"] == default_counter().count("tok0 tok1 tok2") == 6
    assert "prompt_tokens_details" not in usage
    assert wait_for_run(response.json()["id"]).usage_source == "estimate"


def test_a_quiet_upstream_gets_keep_alive_pings(mortar_server, tenant, upstream_models) -> None:
    # The test server pings after 1 s of silence (MORTAR_PING_SECONDS); the mock waits 2.5 s.
    response = post(
        mortar_server,
        tenant,
        {"model": "mock-patient", "messages": ask("[mock chunks=3 delay_ms=2500]")},
    )
    events = sse_events(response.text)
    assert events.count(": ping") >= 2
    assert events[-1] == "data: [DONE]"
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert stored_bytes(run) == response.content


def test_a_replica_that_refuses_before_the_first_byte_is_skipped(
    mortar_server, tenant, upstream_models, dead_url
) -> None:
    # Find a session whose own replica is the dead one, so routing must fail over.
    from gateway.upstream.replicas import replicas_for_session

    alive = MockPair.url(upstream_models.a)
    session = next(
        f"s{i}"
        for i in range(100)
        if replicas_for_session(f"s{i}", [dead_url, alive])[0] == dead_url
    )
    response = post(
        mortar_server,
        tenant,
        {"model": "mock-dead-first", "messages": ask("Hi"), "stream": False},
        **{"X-Mortar-Session": session},
    )
    assert response.status_code == 200
    assert response.headers["X-Mortar-Upstream"] == "mock-dead-first/1"
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.replica, run.session_kept) == (alive, False)


def test_requests_to_a_replica_reuse_one_pooled_connection(
    mortar_server, tenant, upstream_models
) -> None:
    mock_reset(upstream_models.a)
    for _ in range(10):
        post(mortar_server, tenant, {"model": "mock-one", "messages": ask("Hi"), "stream": False})
    peers = {tuple(request["peer"]) for request in mock_requests(upstream_models.a)}
    assert len(mock_requests(upstream_models.a)) == 10
    assert len(peers) == 1  # one keep-alive connection, not one per request


def test_a_model_servers_cookie_never_rides_along_on_a_later_request(
    mortar_server: ServerProcess, tenant: Tenant, other_tenant: Tenant, upstream_models: MockPair
) -> None:
    # The mock sets a cookie on every stream; Mortar's shared client must not keep it, or one
    # organization's request would carry what the model server gave another's.
    mock_reset(upstream_models.a)
    for who in (tenant, other_tenant, tenant):
        response = post(mortar_server, who, {"model": "mock-one", "messages": ask("Hi")})
        assert response.status_code == 200

    arrived = mock_requests(upstream_models.a)
    assert len(arrived) == 3
    assert not any("Cookie" in request["headers"] for request in arrived)
