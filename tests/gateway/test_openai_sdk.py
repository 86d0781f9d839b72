"""The official OpenAI SDK against Mortar running as a real uvicorn process."""

from __future__ import annotations

import asyncio
import json
import re

import openai
import pytest

from tests.conftest import Tenant, wait_for_run
from tests.support.servers import ServerProcess

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}
SPEC_MESSAGES = [
    {"role": "system", "content": "You are a concise assistant for an inference platform."},
    {"role": "user", "content": "What does max_tokens limit?"},
]
pytestmark = pytest.mark.django_db

SPEC_REPLY = "It caps how many tokens the model may generate for this reply."


@pytest.fixture
def client(mortar_server: ServerProcess, tenant: Tenant) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{mortar_server.base_url}/v1", api_key=tenant.secret)


@pytest.fixture
def async_client(mortar_server: ServerProcess, tenant: Tenant) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{mortar_server.base_url}/v1", api_key=tenant.secret)


def run_async(coroutine_function, client: openai.AsyncOpenAI):  # type: ignore[no-untyped-def]
    """Run an async scenario in its own event loop, closing the client inside that loop."""

    async def scenario():  # type: ignore[no-untyped-def]
        async with client:
            return await coroutine_function(client)

    return asyncio.run(scenario())


def test_a_plain_call_returns_the_spec_example(client: openai.OpenAI, tenant: Tenant) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="Qwen/Qwen2.5-7B-Instruct", messages=SPEC_MESSAGES, max_tokens=200
    )
    completion = raw.parse()

    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-") and len(completion.id) == len("chatcmpl-") + 24
    assert completion.model == "Qwen/Qwen2.5-7B-Instruct"
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.message.content == SPEC_REPLY
    assert choice.finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (32, 13)
    assert completion.usage.total_tokens == 45
    assert raw.headers["X-Mortar-Request-Id"] == completion.id
    assert raw.headers["X-Mortar-Deployment"] == "scripted"
    assert raw.headers["X-Mortar-Model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert re.fullmatch(
        r"ruleset=2; mode=shadow; bytes=81; saved=0; passes=; elapsed_us=\d+",
        raw.headers["X-Mortar-Optimizer"],
    )
    assert raw.headers["X-Request-Id"]

    run = wait_for_run(completion.id)
    assert run.organization_id == tenant.organization.id
    assert run.api_key_id == tenant.key.id
    assert run.status == "completed"
    assert run.stream is False
    assert (run.prompt_tokens, run.completion_tokens, run.total_tokens) == (32, 13, 45)
    assert run.usage_source == "estimate"
    assert run.finish_reason == "stop"
    assert run.deployment == "scripted"
    assert json.loads(bytes(run.request_body))["messages"] == SPEC_MESSAGES


def test_a_streaming_call_yields_the_documented_chunk_order(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        messages=[{"role": "user", "content": "What does max_tokens limit?"}],
        model="Qwen/Qwen2.5-7B-Instruct",
        max_tokens=200,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content is None
    pieces = chunks[1:-2]
    assert len(pieces) >= 2
    assert all(c.choices[0].delta.content and c.choices[0].finish_reason is None for c in pieces)
    assert "".join(c.choices[0].delta.content for c in pieces) == SPEC_REPLY
    finish = chunks[-2]
    assert finish.choices[0].finish_reason == "stop"
    assert finish.choices[0].delta is None or finish.choices[0].delta.content is None
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage.prompt_tokens == 17
    assert usage_chunk.usage.completion_tokens == 13
    assert usage_chunk.usage.total_tokens == 30

    run = wait_for_run(chunks[0].id)
    assert run.status == "completed" and run.stream is True
    assert run.chunk_count == len(chunks) + 1  # and [DONE]


def test_max_tokens_cuts_the_reply_with_length(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="Qwen/Qwen2.5-7B-Instruct", messages=SPEC_MESSAGES, max_tokens=4
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 4
    assert SPEC_REPLY.startswith(completion.choices[0].message.content)
    assert completion.choices[0].message.content == "It caps how many"
    assert wait_for_run(completion.id).finish_reason == "length"


def _tool_loop(first, second) -> None:  # type: ignore[no-untyped-def]
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert first.choices[0].message.content is None
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "", "days": 0}
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.tool_calls is None
    assert second.choices[0].message.content == (
        'The tools answered: get_weather returned {"temp_c": 21, "sky": "clear"}.'
    )


def _conversation(first_message) -> list[dict]:  # type: ignore[no-untyped-def]
    call = first_message.tool_calls[0]
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        first_message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21, "sky": "clear"}'},
    ]


def test_a_full_tool_loop_with_the_sync_client(client: openai.OpenAI) -> None:
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(
        model="Qwen/Qwen2.5-7B-Instruct", messages=question, tools=[WEATHER_TOOL]
    )
    second = client.chat.completions.create(
        model="Qwen/Qwen2.5-7B-Instruct",
        messages=_conversation(first.choices[0].message),
        tools=[WEATHER_TOOL],
    )
    _tool_loop(first, second)
    assert wait_for_run(first.id).finish_reason == "tool_calls"


def test_a_full_tool_loop_with_the_async_client(async_client: openai.AsyncOpenAI) -> None:
    async def scenario(client: openai.AsyncOpenAI):  # type: ignore[no-untyped-def]
        question = [{"role": "user", "content": "What is the weather in Paris?"}]
        first = await client.chat.completions.create(
            model="Qwen/Qwen2.5-7B-Instruct", messages=question, tools=[WEATHER_TOOL]
        )
        second = await client.chat.completions.create(
            model="Qwen/Qwen2.5-7B-Instruct",
            messages=_conversation(first.choices[0].message),
            tools=[WEATHER_TOOL],
        )
        return first, second

    _tool_loop(*run_async(scenario, async_client))


def test_async_plain_and_streaming_calls(async_client: openai.AsyncOpenAI) -> None:
    async def scenario(client: openai.AsyncOpenAI):  # type: ignore[no-untyped-def]
        completion = await client.chat.completions.create(
            model="Qwen/Qwen2.5-7B-Instruct", messages=SPEC_MESSAGES, max_tokens=200
        )
        stream = await client.chat.completions.create(
            model="Qwen/Qwen2.5-7B-Instruct",
            messages=SPEC_MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        return completion, [chunk async for chunk in stream]

    completion, chunks = run_async(scenario, async_client)
    assert completion.choices[0].message.content == SPEC_REPLY
    # The finish chunk has no `delta`, so the SDK gives None there.
    text = "".join(
        c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].delta
    )
    assert text == SPEC_REPLY
    assert chunks[-1].choices == []
    assert chunks[-1].usage.total_tokens == 45


def test_a_streamed_tool_call_arrives_in_pieces(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="Qwen/Qwen2.5-7B-Instruct",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks[:-1]]
    assert chunks[-1].choices[0].delta is None  # the finish chunk carries no delta
    calls = [delta.tool_calls[0] for delta in deltas if delta.tool_calls]
    assert calls[0].index == 0 and calls[0].id.startswith("call_")
    assert calls[0].type == "function" and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == ""
    assert all(c.id is None and c.function.name is None for c in calls[1:])
    assert json.loads("".join(c.function.arguments for c in calls)) == {"city": "", "days": 0}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_required_calls_every_tool_and_parallel_false_only_the_first(
    client: openai.OpenAI,
) -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
    messages = [{"role": "user", "content": "Weather and time?"}]
    every = client.chat.completions.create(
        model="Qwen/Qwen2.5-7B-Instruct",
        messages=messages,
        tools=[WEATHER_TOOL, other],
        tool_choice="required",
    )
    first_only = client.chat.completions.create(
        model="Qwen/Qwen2.5-7B-Instruct",
        messages=messages,
        tools=[WEATHER_TOOL, other],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    assert [c.function.name for c in every.choices[0].message.tool_calls] == [
        "get_weather",
        "get_time",
    ]
    assert [c.function.name for c in first_only.choices[0].message.tool_calls] == ["get_weather"]


def test_models_lists_the_catalog(client: openai.OpenAI) -> None:
    models = client.models.list()
    entry = next(m for m in models.data if m.id == "Qwen/Qwen2.5-7B-Instruct")
    assert entry.object == "model"
    assert entry.model_extra["context_window"] == 4096


def test_a_wrong_key_raises_the_sdks_authentication_error(mortar_server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=f"{mortar_server.base_url}/v1", api_key="mk-not-a-key")
    with pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(model="Qwen/Qwen2.5-7B-Instruct", messages=SPEC_MESSAGES)
    assert caught.value.code == "invalid_key"
    assert caught.value.status_code == 401
