"""Messages through a deployment that forwards to model servers: the official Anthropic SDK,
Mortar, and the mock vLLM-style model server, each a real process. The request is translated to
the chat dialect on the way there, and the reply back, streamed or not."""

from __future__ import annotations

import json

import anthropic
import httpx
import orjson
import pytest

from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair, mock_requests, mock_reset

pytestmark = pytest.mark.django_db

# What may reach a model server from the Messages route: the fields Mortar checks, its own
# transport fields, and the reasoning switch `thinking` becomes.
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
    "stream",
    "stream_options",
    "chat_template_kwargs",
}
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
PING = b'event: ping\ndata: {"type": "ping"}\n\n'


@pytest.fixture
def client(mortar_server: ServerProcess, tenant: Tenant) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=mortar_server.base_url, api_key=tenant.secret, max_retries=0
    )


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def mock_prompt_tokens(arrived: dict) -> int:
    """The prompt the mock counts (a token per four characters of the messages' JSON)."""
    return max(1, len(json.dumps(arrived["body"]["messages"])) // 4)


def test_a_message_reaches_the_model_server_as_a_chat_request_and_comes_back(
    client: anthropic.Anthropic, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    raw = client.messages.with_raw_response.create(
        model="mock-one",
        max_tokens=50,
        system="Be brief.",
        messages=ask("Hello there [mock chunks=5 cached=3]"),
        # This SDK takes the sampling fields only as extra body fields; the API still does.
        extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 40},
        stop_sequences=["NEVER-SAID"],
        metadata={"user_id": "end-user-7"},
    )
    message = raw.parse()

    [arrived] = mock_requests(upstream_models.a)
    body = arrived["body"]
    assert set(body) <= ALLOWED_UPSTREAM_FIELDS
    assert body["model"] == "mock-upstream-name"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there [mock chunks=5 cached=3]"},
    ]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.5, 0.9, 50)
    assert body["stop"] == ["NEVER-SAID"]
    assert "top_k" not in body and "user" not in body and "metadata" not in body
    assert "chat_template_kwargs" not in body  # no `thinking`, no switch
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})

    assert message.model == "mock-one"
    assert message.content[0].text == "tok0 tok1 tok2 tok3 tok4"
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    # The server's counts, its cached tokens read from the cache and out of the input tokens.
    prompt = mock_prompt_tokens(arrived)
    assert message.usage.input_tokens == prompt - 3
    assert message.usage.cache_read_input_tokens == 3
    assert message.usage.output_tokens == 5
    assert raw.headers["X-Mortar-Upstream"] == "mock-one/0"

    run = wait_for_run(message.id)
    assert (run.status, run.usage_source, run.cached_tokens) == ("completed", "upstream", 3)
    assert (run.prompt_tokens, run.completion_tokens) == (prompt, 5)
    assert run.end_user == "end-user-7"
    assert json.loads(bytes(run.upstream_request)) == body


def test_a_streamed_message_is_translated_event_by_event(
    client: anthropic.Anthropic, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    with client.messages.stream(
        model="mock-one", max_tokens=50, messages=ask("Hi [mock chunks=5 cached=7]")
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    [arrived] = mock_requests(upstream_models.a)
    assert text == "tok0 tok1 tok2 tok3 tok4"
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn"
    # Learnt only at the end of the stream: the server's counts, in `message_delta`.
    assert final.usage.cache_read_input_tokens == 7
    assert final.usage.input_tokens == mock_prompt_tokens(arrived) - 7
    assert final.usage.output_tokens == 5
    run = wait_for_run(final.id)
    assert (run.stream, run.usage_source, run.cached_tokens) == (True, "upstream", 7)


def test_a_full_tool_use_loop_through_the_model_server(
    client: anthropic.Anthropic, upstream_models: MockPair
) -> None:
    mock_reset(upstream_models.a)
    first = client.messages.create(
        model="mock-one", max_tokens=100, messages=ask("Weather in Paris?"), tools=[WEATHER_TOOL]
    )
    assert first.stop_reason == "tool_use"
    (call,) = first.content
    assert call.type == "tool_use" and call.id.startswith("toolu_")
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})

    with client.messages.stream(
        model="mock-one",
        max_tokens=100,
        messages=ask("Weather in Paris?"),
        tools=[WEATHER_TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:
        streamed = stream.get_final_message()
    assert streamed.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in streamed.content] == [
        ("tool_use", "get_weather", {"city": "Paris"})
    ]

    second = client.messages.create(
        model="mock-one",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        messages=[
            *ask("Weather in Paris?"),
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "21 C"},
                ],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0].text.startswith("tok0")

    requests = mock_requests(upstream_models.a)
    assert requests[0]["body"]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": WEATHER_TOOL["input_schema"],
            },
        }
    ]
    assert requests[1]["body"]["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }
    assert requests[2]["body"]["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "21 C"},
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_reasoning_comes_back_as_thinking_and_thinking_is_the_servers_switch(
    client: anthropic.Anthropic, upstream_models: MockPair, stream: bool
) -> None:
    mock_reset(upstream_models.a)
    request = {
        "model": "mock-one",
        "max_tokens": 2000,
        "messages": ask("[mock reasoning=3 chunks=2]"),
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    if stream:
        with client.messages.stream(**request) as streaming:
            message = streaming.get_final_message()
    else:
        message = client.messages.create(**request)
    off = client.messages.create(**{**request, "thinking": {"type": "disabled"}})

    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "think0 think1 think2 "
    assert message.content[1].text == "tok0 tok1"
    assert [block.type for block in off.content] == ["text"]
    on_request, off_request = mock_requests(upstream_models.a)
    assert on_request["body"]["chat_template_kwargs"] == {"enable_thinking": True}
    assert off_request["body"]["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_stop_sequence_the_server_stopped_at_is_reported(
    client: anthropic.Anthropic, upstream_models: MockPair, stream: bool
) -> None:
    request = {
        "model": "mock-one",
        "max_tokens": 100,
        "messages": ask("[mock chunks=8]"),
        "stop_sequences": ["END", "tok3"],
    }
    if stream:
        with client.messages.stream(**request) as streaming:
            message = streaming.get_final_message()
    else:
        message = client.messages.create(**request)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "tok3")
    assert message.content[0].text == "tok0 tok1 tok2 "


def test_a_quiet_model_server_brings_anthropic_pings(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair
) -> None:
    received = b""
    with httpx.stream(
        "POST",
        f"{mortar_server.base_url}/v1/messages",
        content=orjson.dumps(
            {
                "model": "mock-patient",
                "max_tokens": 50,
                "stream": True,
                "messages": ask("[mock chunks=2 delay_ms=1500]"),
            }
        ),
        headers={"x-api-key": tenant.secret},
        timeout=30,
    ) as response:
        run_id = response.headers["X-Mortar-Run-Id"]
        for raw in response.iter_raw():
            received += raw

    assert PING in received  # MORTAR_PING_SECONDS is 1 in the tests
    assert received.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    assert stored_bytes(wait_for_run(run_id)) == received  # pings are stored like any event


def test_the_sdk_ignores_pings(client: anthropic.Anthropic, upstream_models: MockPair) -> None:
    with client.messages.stream(
        model="mock-patient", max_tokens=50, messages=ask("[mock chunks=2 delay_ms=1500]")
    ) as stream:
        assert "".join(stream.text_stream) == "tok0 tok1"
