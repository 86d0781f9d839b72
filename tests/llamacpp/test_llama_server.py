"""Mortar in front of a real model server, llama-cpp-python's with SmolLM2-135M-Instruct: replies
as JSON and streamed through the OpenAI SDK, the Messages route through Anthropic's, replay,
Stop, and usage billed on the model server's own count (its stream reports none)."""

from __future__ import annotations

import re
import time

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.llamacpp.conftest import ALIAS, LlamaServer
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.django_db, pytest.mark.llamacpp]

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
MAX_TOKENS = 8


@pytest.fixture
def client(mortar_server: ServerProcess, tenant: Tenant) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{mortar_server.base_url}/v1", api_key=tenant.secret, max_retries=0
    )


def own_reply(llama: LlamaServer) -> dict:
    """The model server's answer to QUESTION asked directly, as one JSON body with its usage."""
    response = httpx.post(
        f"{llama.base_url}/v1/chat/completions",
        json={"model": ALIAS, "messages": QUESTION, "max_tokens": MAX_TOKENS, "temperature": 0},
        timeout=60,
    )
    assert response.status_code == 200
    return response.json()


def test_a_json_reply_is_billed_on_the_model_servers_own_count(
    client: openai.OpenAI, llama_server: LlamaServer
) -> None:
    own = own_reply(llama_server)
    completion = client.chat.completions.create(
        model=llama_server.model,
        messages=QUESTION,
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=False,
    )
    assert completion.choices[0].message.content == own["choices"][0]["message"]["content"]
    assert completion.choices[0].finish_reason == own["choices"][0]["finish_reason"]
    run = wait_for_run(completion.id)
    # The chat template adds a system prompt: the server counts it, Mortar's estimate does not.
    assert own["usage"]["prompt_tokens"] > completion.usage.prompt_tokens
    assert run.usage_source == "upstream_count"
    assert (run.prompt_tokens, run.completion_tokens, run.total_tokens) == (
        own["usage"]["prompt_tokens"],
        own["usage"]["completion_tokens"],
        own["usage"]["total_tokens"],
    )


def test_a_streamed_reply_is_relayed_and_replayed_byte_for_byte(
    mortar_server: ServerProcess, tenant: Tenant, client: openai.OpenAI, llama_server: LlamaServer
) -> None:
    own = own_reply(llama_server)
    with client.chat.completions.with_streaming_response.create(
        model=llama_server.model,
        messages=QUESTION,
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
    ) as response:
        received = b"".join(response.iter_bytes())
        run_id = response.headers["X-Mortar-Run-Id"]
    assert received.endswith(b"data: [DONE]\n\n")
    chunks = [
        orjson.loads(event.removeprefix(b"data: "))
        for event in received.split(b"\n\n")
        if event.startswith(b"data: {")
    ]
    text = "".join(
        chunk["choices"][0].get("delta", {}).get("content") or ""
        for chunk in chunks
        if chunk["choices"]
    )
    assert text == own["choices"][0]["message"]["content"]
    run = wait_for_run(run_id)
    assert run.status == "completed"
    assert run.usage_source == "upstream_count"
    assert (run.prompt_tokens, run.completion_tokens) == (
        own["usage"]["prompt_tokens"],
        own["usage"]["completion_tokens"],
    )
    assert stored_bytes(run) == received
    replayed = httpx.get(
        f"{mortar_server.base_url}/v1/chat/completions/runs/{run_id}",
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )
    assert replayed.status_code == 200
    # Each replayed event carries its number (`id:`), for a client that resumes.
    assert re.sub(rb"(?m)^id: \d+\n", b"", replayed.content) == received


def test_stop_ends_the_generation_on_the_model_server(
    mortar_server: ServerProcess, tenant: Tenant, client: openai.OpenAI, llama_server: LlamaServer
) -> None:
    disconnects = llama_server.log().count("Disconnected from client")
    stream = client.chat.completions.create(
        model=llama_server.model,
        messages=[{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
        max_tokens=1000,
        temperature=0,
        stream=True,
    )
    chunks = iter(stream)
    first = next(chunks)
    stopped = httpx.post(
        f"{mortar_server.base_url}/v1/generations/{first.id}/stop",
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=10,
    )
    assert stopped.status_code == 200
    rest = list(chunks)  # the stream ends, without a finish chunk as a stopped stream does
    assert all(chunk.choices[0].finish_reason is None for chunk in rest)
    run = wait_for_run(first.id)
    assert run.status == "stopped"
    assert run.completion_tokens is not None and run.completion_tokens < 1000
    deadline = time.monotonic() + 10
    while llama_server.log().count("Disconnected from client") == disconnects:
        assert time.monotonic() < deadline, "the model server never saw Mortar go"
        time.sleep(0.1)


def test_the_messages_route_is_translated_to_the_model_server_and_back(
    mortar_server: ServerProcess, tenant: Tenant, llama_server: LlamaServer
) -> None:
    own = own_reply(llama_server)
    client = anthropic.Anthropic(
        base_url=mortar_server.base_url, api_key=tenant.secret, max_retries=0
    )
    message = client.messages.create(
        model=llama_server.model,
        max_tokens=MAX_TOKENS,
        messages=QUESTION,
        extra_body={"temperature": 0},  # this SDK's `create` no longer takes it
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text"
    assert message.content[0].text == own["choices"][0]["message"]["content"]
    assert message.stop_reason == (
        "max_tokens" if own["choices"][0]["finish_reason"] == "length" else "end_turn"
    )
    run = wait_for_run(message.id)
    assert run.usage_source == "upstream_count"
    assert run.prompt_tokens == own["usage"]["prompt_tokens"]
    assert run.completion_tokens == own["usage"]["completion_tokens"]
