"""Replies, chunks and error bodies against OpenAI's published schemas (`tests/data/openai/`).

With the organization's `finish_chunk_delta` on, every JSON reply, every streamed chunk and every
error body validates: the finish chunk carries `"delta": {}`, and the message and the role
chunk carry `refusal: null`. Without it, the finish chunk (no `delta`) and the JSON message (no
`refusal`) are exactly what the schemas refuse, which shows the check has teeth.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from accounts.models import Organization
from accounts.services import key_create
from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair

pytestmark = pytest.mark.django_db

SCHEMAS = json.loads(
    (Path(__file__).parents[1] / "data" / "openai" / "chat-completions.schema.json").read_text()
)
MODEL = "Qwen/Qwen2.5-7B-Instruct"
QUESTION = [{"role": "user", "content": "What does max_tokens limit?"}]
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


def validator(name: str) -> Draft202012Validator:
    """The validator of one of OpenAI's schemas, its `$ref`s resolved within the file."""
    Draft202012Validator.check_schema(SCHEMAS)
    return Draft202012Validator({**SCHEMAS, "$ref": f"#/$defs/{name}"})


REPLY = validator("CreateChatCompletionResponse")
CHUNK = validator("CreateChatCompletionStreamResponse")
ERROR = validator("ErrorResponse")


@pytest.fixture(scope="module")
def strict(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> Tenant:
    """An organization with `finish_chunk_delta` on, committed for the server process."""
    with django_db_blocker.unblock():
        organization, _ = Organization.objects.update_or_create(
            name="openai-strict-co", defaults={"finish_chunk_delta": True}
        )
        issued = key_create(organization=organization, name="tests")
    return Tenant(organization=organization, key=issued.key, secret=issued.secret)


def post(server: ServerProcess, secret: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def chunks_of(stream: bytes) -> list[dict[str, Any]]:
    """Every `data:` event of a stream but `[DONE]`, decoded; the stream must end with it."""
    events = [event for event in stream.split(b"\n\n") if event.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]"
    return [orjson.loads(event.removeprefix(b"data: ")) for event in events[:-1]]


def test_a_json_reply_validates_and_carries_refusal_null(
    mortar_server: ServerProcess, strict: Tenant
) -> None:
    response = post(
        mortar_server, strict.secret, {"model": MODEL, "messages": QUESTION, "stream": False}
    )

    assert response.status_code == 200
    reply = response.json()
    REPLY.validate(reply)
    assert reply["choices"][0]["message"] == {
        "role": "assistant",
        "content": "It caps how many tokens the model may generate for this reply.",
        "refusal": None,
    }


def test_a_json_reply_with_tool_calls_validates(
    mortar_server: ServerProcess, strict: Tenant
) -> None:
    body = {"model": MODEL, "messages": QUESTION, "tools": [WEATHER_TOOL], "stream": False}
    reply = post(mortar_server, strict.secret, body).json()

    REPLY.validate(reply)
    message = reply["choices"][0]["message"]
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert list(message) == ["role", "content", "refusal", "tool_calls"]
    assert message["refusal"] is None
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("tools", [None, [WEATHER_TOOL]], ids=["text", "tool-calls"])
def test_every_chunk_of_a_stream_validates(
    mortar_server: ServerProcess, strict: Tenant, tools: list[dict[str, Any]] | None
) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": QUESTION,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = tools
    response = post(mortar_server, strict.secret, body)

    chunks = chunks_of(response.content)
    for chunk in chunks:
        CHUNK.validate(chunk)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    finish = chunks[-2]["choices"][0]
    assert finish["delta"] == {}
    assert finish["finish_reason"] == ("tool_calls" if tools else "stop")
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] > 0
    # Stored as sent: the replay re-emits the same chunks.
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert stored_bytes(run) == response.content


def test_the_sdk_s_stream_helper_reads_the_refusal_field(
    mortar_server: ServerProcess, strict: Tenant
) -> None:
    client = openai.OpenAI(base_url=f"{mortar_server.base_url}/v1", api_key=strict.secret)
    with client.chat.completions.stream(model=MODEL, messages=QUESTION) as stream:
        for _ in stream:
            pass
        message = stream.get_final_completion().choices[0].message
    assert message.content == "It caps how many tokens the model may generate for this reply."
    assert message.refusal is None


def test_a_model_server_s_reply_validates_too(
    mortar_server: ServerProcess, strict: Tenant, upstream_models: MockPair
) -> None:
    """Relayed deltas (vLLM's reasoning field among them) keep every chunk valid."""
    body = {
        "model": "mock-one",
        "messages": [{"role": "user", "content": "[mock chunks=4 reasoning=2]"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = chunks_of(post(mortar_server, strict.secret, body).content)

    for chunk in chunks:
        CHUNK.validate(chunk)
    assert any("reasoning_content" in c["choices"][0]["delta"] for c in chunks if c["choices"])
    assert chunks[-2]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }

    reply = post(mortar_server, strict.secret, {**body, "stream": False}).json()
    REPLY.validate(reply)
    assert reply["choices"][0]["message"]["refusal"] is None


@pytest.mark.parametrize(
    ("secret", "body", "status", "code"),
    [
        ("mk-not-a-key", {"model": MODEL, "messages": QUESTION}, 401, "invalid_key"),
        (None, {"model": MODEL}, 400, "invalid_parameter"),
        (None, {"model": "no-such-model", "messages": QUESTION}, 404, "model_not_found"),
        (None, {"model": MODEL, "messages": QUESTION, "n": 2}, 400, "invalid_parameter"),
    ],
    ids=["bad-key", "no-messages", "unknown-model", "n"],
)
def test_error_bodies_validate(
    mortar_server: ServerProcess,
    strict: Tenant,
    secret: str | None,
    body: dict[str, Any],
    status: int,
    code: str,
) -> None:
    response = post(mortar_server, secret or strict.secret, body)

    assert response.status_code == status
    ERROR.validate(response.json())
    assert response.json()["error"]["code"] == code


def test_an_error_after_the_stream_started_validates(
    mortar_server: ServerProcess, strict: Tenant, upstream_models: MockPair
) -> None:
    body = {
        "model": "mock-one",
        "messages": [{"role": "user", "content": "[mock fault=drop chunks=10]"}],
        "stream": True,
    }
    stream = post(mortar_server, strict.secret, body).content
    events = [e.removeprefix(b"data: ") for e in stream.split(b"\n\n") if e.startswith(b"data: ")]

    assert events[-1] != b"[DONE]"
    *chunks, error = (orjson.loads(event) for event in events)
    for chunk in chunks:
        CHUNK.validate(chunk)
    ERROR.validate(error)
    assert error["error"]["type"] == "upstream_error"


def test_without_the_setting_the_schemas_refuse_the_finish_chunk_and_the_message(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    assert tenant.organization.finish_chunk_delta is False
    chunks = chunks_of(
        post(
            mortar_server, tenant.secret, {"model": MODEL, "messages": QUESTION, "stream": True}
        ).content
    )
    with pytest.raises(ValidationError, match="'delta' is a required property"):
        CHUNK.validate(chunks[-1])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}

    reply = post(
        mortar_server, tenant.secret, {"model": MODEL, "messages": QUESTION, "stream": False}
    ).json()
    with pytest.raises(ValidationError, match="'refusal' is a required property"):
        REPLY.validate(reply)
