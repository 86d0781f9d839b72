"""The official Anthropic SDK against Mortar's Messages route, on a real uvicorn process, with the
built-in scripted model."""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import orjson
import pytest

from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

MODEL = "Qwen/Qwen2.5-7B-Instruct"
SYSTEM = "You are a concise assistant for an inference platform."
QUESTION = {"role": "user", "content": "What does max_tokens limit?"}
SPEC_REPLY = "It caps how many tokens the model may generate for this reply."
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
WEATHER_QUESTION = {"role": "user", "content": "What is the weather in Paris?"}
WEATHER_RESULT = '{"temp_c": 21, "sky": "clear"}'
MESSAGE_ID = re.compile(r"msg_[0-9a-f]{24}")


@pytest.fixture
def client(mortar_server: ServerProcess, tenant: Tenant) -> anthropic.Anthropic:
    # The SDK's own default: the key in `x-api-key`.
    return anthropic.Anthropic(
        base_url=mortar_server.base_url, api_key=tenant.secret, max_retries=0
    )


def event_names(raw: bytes) -> list[str]:
    return [line[7:] for line in raw.decode().splitlines() if line.startswith("event: ")]


def test_messages_create_answers_the_spec_example_as_a_message(
    client: anthropic.Anthropic, tenant: Tenant
) -> None:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=200, system=SYSTEM, messages=[QUESTION]
    )
    message = raw.parse()

    assert MESSAGE_ID.fullmatch(message.id)
    assert (message.type, message.role, message.model) == ("message", "assistant", MODEL)
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == SPEC_REPLY
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    # The same conversation costs the same as on chat completions: 32 and 13.
    assert (message.usage.input_tokens, message.usage.output_tokens) == (32, 13)
    assert message.usage.cache_read_input_tokens == 0
    assert raw.headers["X-Mortar-Run-Id"] == raw.headers["X-Mortar-Request-Id"] == message.id
    assert raw.headers["X-Mortar-Deployment"] == "scripted"
    assert raw.headers["X-Mortar-Model"] == MODEL
    assert raw.headers["X-Mortar-Optimizer"].startswith("ruleset=2; mode=shadow;")
    assert raw.headers["request-id"] == raw.headers["X-Request-Id"]
    assert message._request_id == raw.headers["X-Request-Id"]

    run = wait_for_run(message.id)
    assert run.organization_id == tenant.organization.id
    assert (run.status, run.stream, run.finish_reason) == ("completed", False, "stop")
    assert (run.prompt_tokens, run.completion_tokens, run.total_tokens) == (32, 13, 45)
    assert run.usage_source == "estimate"
    assert json.loads(bytes(run.request_body))["system"] == SYSTEM
    assert stored_bytes(run) == raw.http_response.content  # the Message, as sent


def test_messages_stream_gives_text_stream_and_the_final_message(
    client: anthropic.Anthropic,
) -> None:
    with client.messages.stream(
        model=MODEL, max_tokens=200, system=SYSTEM, messages=[QUESTION]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert text == SPEC_REPLY
    assert MESSAGE_ID.fullmatch(final.id)
    assert [block.type for block in final.content] == ["text"]
    assert final.content[0].text == SPEC_REPLY
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (32, 13)
    run = wait_for_run(final.id)
    assert (run.status, run.stream, run.completion_tokens) == ("completed", True, 13)


def test_a_stream_is_anthropics_event_sequence_each_event_one_stored_chunk(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    received = b""
    with httpx.stream(
        "POST",
        f"{mortar_server.base_url}/v1/messages",
        content=orjson.dumps(
            {"model": MODEL, "max_tokens": 200, "messages": [QUESTION], "stream": True}
        ),
        headers={"x-api-key": tenant.secret, "anthropic-version": "2023-06-01"},
        timeout=30,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        run_id = response.headers["X-Mortar-Run-Id"]
        for raw in response.iter_raw():
            received += raw

    names = event_names(received)
    pieces = names.count("content_block_delta")
    assert pieces >= 2
    assert names == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * pieces,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    events = [orjson.loads(line[6:]) for line in received.splitlines() if line.startswith(b"data:")]
    assert events[0]["message"]["id"] == run_id
    assert events[0]["message"]["usage"]["input_tokens"] == 17
    assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") == (
        SPEC_REPLY
    )
    assert events[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == 13

    run = wait_for_run(run_id)
    assert stored_bytes(run) == received
    assert run.chunk_count == len(names)  # one chunk per event, exactly as sent


def test_stream_defaults_to_false_whatever_accept_says(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    response = httpx.post(
        f"{mortar_server.base_url}/v1/messages",
        content=orjson.dumps({"model": MODEL, "max_tokens": 200, "messages": [QUESTION]}),
        headers={"x-api-key": tenant.secret, "Accept": "text/event-stream"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["content"] == [{"type": "text", "text": SPEC_REPLY}]


def test_a_full_tool_use_loop_with_the_scripted_model(client: anthropic.Anthropic) -> None:
    first = client.messages.create(
        model=MODEL, max_tokens=200, messages=[WEATHER_QUESTION], tools=[WEATHER_TOOL]
    )
    assert first.stop_reason == "tool_use"
    (call,) = first.content
    assert call.type == "tool_use"
    assert call.id.startswith("toolu_")
    assert (call.name, call.input) == ("get_weather", {"city": "", "days": 0})

    second = client.messages.create(
        model=MODEL,
        max_tokens=200,
        tools=[WEATHER_TOOL],
        messages=[
            WEATHER_QUESTION,
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": WEATHER_RESULT}
                ],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    assert [block.type for block in second.content] == ["text"]
    assert second.content[0].text == f"The tools answered: get_weather returned {WEATHER_RESULT}."
    assert wait_for_run(first.id).finish_reason == "tool_calls"


def test_a_streamed_tool_use_arrives_as_a_tool_use_block(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL,
        max_tokens=200,
        messages=[WEATHER_QUESTION],
        tools=[WEATHER_TOOL, {"name": "get_time", "input_schema": {"type": "object"}}],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:
        final = stream.get_final_message()

    assert final.stop_reason == "tool_use"
    (call,) = final.content
    assert (call.type, call.name, call.input) == (
        "tool_use",
        "get_weather",
        {"city": "", "days": 0},
    )


def test_any_calls_every_tool_and_disable_parallel_tool_use_only_the_first(
    client: anthropic.Anthropic,
) -> None:
    tools = [WEATHER_TOOL, {"name": "get_time", "input_schema": {"type": "object"}}]
    every = client.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=[WEATHER_QUESTION],
        tools=tools,
        tool_choice={"type": "any"},
    )
    first_only = client.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=[WEATHER_QUESTION],
        tools=tools,
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )
    none = client.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=[WEATHER_QUESTION],
        tools=tools,
        tool_choice={"type": "none"},
    )
    assert [block.name for block in every.content] == ["get_weather", "get_time"]
    assert len({block.id for block in every.content}) == 2
    assert [block.name for block in first_only.content] == ["get_weather"]
    assert [block.type for block in none.content] == ["text"]


def test_count_tokens_counts_what_the_route_bills(
    client: anthropic.Anthropic, mortar_server: ServerProcess, tenant: Tenant
) -> None:
    counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=[QUESTION])
    billed = client.messages.create(model=MODEL, max_tokens=200, system=SYSTEM, messages=[QUESTION])
    chat = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        content=orjson.dumps(
            {
                "model": MODEL,
                "messages": [{"role": "system", "content": SYSTEM}, QUESTION],
                "stream": False,
            }
        ),
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    ).json()

    assert counted.input_tokens == billed.usage.input_tokens == 32
    assert chat["usage"]["prompt_tokens"] == 32

    with_tools = {"messages": [WEATHER_QUESTION], "tools": [WEATHER_TOOL]}
    counted_tools = client.messages.count_tokens(model=MODEL, **with_tools)
    billed_tools = client.messages.create(model=MODEL, max_tokens=200, **with_tools)
    assert counted_tools.input_tokens == billed_tools.usage.input_tokens
    assert counted_tools.input_tokens > 17  # the tool definitions are counted


def test_bearer_auth_and_anthropic_headers_are_accepted(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    bearer = anthropic.Anthropic(
        base_url=mortar_server.base_url, auth_token=tenant.secret, max_retries=0
    )
    message = bearer.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=[QUESTION],
        extra_headers={"anthropic-beta": "some-beta-2099-01-01"},
    )
    assert message.content[0].text == SPEC_REPLY
    assert wait_for_run(message.id).api_key_id == tenant.key.id


def test_the_end_user_header_wins_over_metadata_user_id(client: anthropic.Anthropic) -> None:
    from_header = client.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=[QUESTION],
        metadata={"user_id": "user-in-body"},
        extra_headers={"X-Mortar-End-User-Id": "user-in-header"},
    )
    from_body = client.messages.create(
        model=MODEL, max_tokens=200, messages=[QUESTION], metadata={"user_id": "user-in-body"}
    )
    header_run, body_run = wait_for_run(from_header.id), wait_for_run(from_body.id)
    assert header_run.end_user == "user-in-header"
    assert body_run.end_user == "user-in-body"
    # As the chat body's `user` does, `metadata.user_id` names the session.
    assert header_run.session == body_run.session == "user-in-body"


def test_max_tokens_cuts_the_reply_with_max_tokens(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model=MODEL, max_tokens=4, messages=[QUESTION])
    assert message.stop_reason == "max_tokens"
    assert message.content[0].text == "It caps how many"
    assert message.usage.output_tokens == 4
    assert wait_for_run(message.id).finish_reason == "length"


def test_a_wrong_key_raises_the_sdks_authentication_error(mortar_server: ServerProcess) -> None:
    client = anthropic.Anthropic(base_url=mortar_server.base_url, api_key="mk-nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        client.messages.create(model=MODEL, max_tokens=200, messages=[QUESTION])
    assert caught.value.status_code == 401
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": "The API key is not valid or has been revoked.",
        },
    }
