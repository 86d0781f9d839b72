"""Malformed requests against the real server: the exact refusal, and the refused run it stores.

The OpenAI envelope with a machine-readable code, never a 422, an HTML
page or a 500 for bad input, and `X-Request-Id` on every response. A refused request with a
valid key is still a run of its organization, with the body as received and the error body as
sent (gateway/pipeline.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from telemetry.models import Run
from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess

# The server writes runs to the test database; the tests read them.
pytestmark = pytest.mark.django_db

MAX_BODY = 4 * 1024 * 1024
KEPT_BODY = 64 * 1024
GENERATED_REQUEST_ID = re.compile(r"req_[0-9a-f]{24}")
RUN_ID = re.compile(r"chatcmpl-[0-9a-f]{24}")

USER = {"role": "user", "content": "Hello"}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def body(**fields: Any) -> bytes:
    """A valid non-streaming request with `fields` set (or replaced) on top."""
    return orjson.dumps({"messages": [USER], "stream": False, **fields})


def messages(*items: Any) -> bytes:
    return orjson.dumps({"messages": list(items), "stream": False})


def tools(*items: Any, **fields: Any) -> bytes:
    return body(tools=list(items), **fields)


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def assistant_calling(*calls: Any) -> bytes:
    return messages(USER, {"role": "assistant", "content": None, "tool_calls": list(calls)})


def too_large() -> bytes:
    """A well-formed request of exactly 4 MiB + 1 byte."""
    head, tail = b'{"messages":[{"role":"user","content":"', b'"}],"stream":false}'
    return head + b"x" * (MAX_BODY + 1 - len(head) - len(tail)) + tail


def prompt_leaving(tokens_left: int) -> bytes:
    """A prompt that leaves exactly `tokens_left` of the 4,096-token window for the reply.

    "hello" and each " hello" are one Qwen token; the prompt adds 5 tokens of message framing
    and 6 of reply framing, and the plan 32 of template overhead.
    """
    content_tokens = 4096 - 32 - 6 - 5 - tokens_left
    return messages({"role": "user", "content": "hello" + " hello" * (content_tokens - 1)})


@dataclass(frozen=True)
class BadRequest:
    content: bytes
    status: int
    code: str
    headers: dict[str, str] = field(default_factory=dict)


def bad(content: bytes, status: int, code: str, **headers: str) -> BadRequest:
    return BadRequest(content=content, status=status, code=code, headers=headers)


def invalid(content: bytes, **headers: str) -> BadRequest:
    return bad(content, 400, "invalid_parameter", **headers)


CASES = {
    # The body itself.
    "bad-json": bad(b'{"messages": [', 400, "invalid_json"),
    "empty-body": bad(b"", 400, "invalid_json"),
    "json-array": bad(b'[{"role": "user", "content": "Hello"}]', 400, "invalid_json"),
    "json-string": bad(b'"Hello"', 400, "invalid_json"),
    "invalid-utf8": bad(
        b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "invalid_json"
    ),
    "lone-surrogate": bad(
        b'{"messages": [{"role": "user", "content": "\\ud800"}]}', 400, "invalid_json"
    ),
    "nested-too-deep": bad(b'{"a":' + b"[" * 2000 + b"]" * 2000 + b"}", 400, "invalid_json"),
    # messages
    "no-messages": invalid(orjson.dumps({"stream": False})),
    "messages-null": invalid(body(messages=None)),
    "messages-not-array": invalid(body(messages={"role": "user", "content": "Hello"})),
    "messages-empty": invalid(body(messages=[])),
    "messages-513": invalid(body(messages=[USER] * 513)),
    "message-not-object": invalid(messages("Hello")),
    "role-missing": invalid(messages({"content": "Hello"})),
    "role-number": invalid(messages({"role": 1, "content": "Hello"})),
    "role-wizard": bad(messages({"role": "wizard", "content": "Hello"}), 400, "invalid_role"),
    "content-number": invalid(messages({"role": "user", "content": 42})),
    "content-object": invalid(messages({"role": "user", "content": {"text": "Hello"}})),
    "content-missing-on-user": invalid(messages({"role": "user"})),
    "content-null-on-user": invalid(messages({"role": "user", "content": None})),
    "content-part-not-object": invalid(messages({"role": "user", "content": ["Hello"]})),
    "text-part-text-not-string": invalid(
        messages({"role": "user", "content": [{"type": "text", "text": 42}]})
    ),
    # tool calls and tool messages
    "tool_calls-on-user": invalid(
        messages(
            {
                "role": "user",
                "content": "Hello",
                "tool_calls": [
                    {"id": "call_1", "function": {"name": "get_weather", "arguments": "{}"}}
                ],
            }
        )
    ),
    "tool_calls-not-array": invalid(
        messages(USER, {"role": "assistant", "content": None, "tool_calls": {"id": "call_1"}})
    ),
    "tool-call-without-id": invalid(
        assistant_calling({"function": {"name": "get_weather", "arguments": "{}"}})
    ),
    "tool-call-arguments-not-string": invalid(
        assistant_calling(
            {"id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        )
    ),
    "tool-message-without-tool_call_id": invalid(
        messages(
            USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "function": {"name": "get_weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "content": "21 C"},
        )
    ),
    # tools
    "tools-not-array": bad(body(tools=WEATHER), 400, "invalid_tools"),
    "tool-without-function": bad(tools({"type": "function"}), 400, "invalid_tools"),
    "tool-name-with-space": bad(tools(tool("get weather")), 400, "invalid_tools"),
    "tool-name-65-chars": bad(tools(tool("a" * 65)), 400, "invalid_tools"),
    "tool-names-duplicate": bad(tools(WEATHER, WEATHER), 400, "invalid_tools"),
    "tools-129": bad(tools(*(tool(f"t{i}") for i in range(129))), 400, "invalid_tools"),
    "tool-parameters-not-object": bad(
        tools({"type": "function", "function": {"name": "f", "parameters": "{}"}}),
        400,
        "invalid_tools",
    ),
    # tool_choice and parallel_tool_calls
    "tool_choice-without-tools": bad(body(tool_choice="auto"), 400, "invalid_tool_choice"),
    "tool_choice-unknown-string": bad(
        tools(WEATHER, tool_choice="any"), 400, "invalid_tool_choice"
    ),
    "tool_choice-undeclared-function": bad(
        tools(WEATHER, tool_choice={"type": "function", "function": {"name": "get_time"}}),
        400,
        "invalid_tool_choice",
    ),
    "tool_choice-malformed-object": bad(
        tools(WEATHER, tool_choice={"type": "function", "name": "get_weather"}),
        400,
        "invalid_tool_choice",
    ),
    "parallel_tool_calls-string": invalid(tools(WEATHER, parallel_tool_calls="false")),
    "parallel_tool_calls-without-tools": invalid(body(parallel_tool_calls=True)),
    # output cap, stream and sampling
    "max_tokens-0": invalid(body(max_tokens=0)),
    "max_tokens-negative": invalid(body(max_tokens=-1)),
    "max_tokens-fraction": invalid(body(max_tokens=1.5)),
    "max_tokens-string": invalid(body(max_tokens="100")),
    "max_tokens-true": invalid(body(max_tokens=True)),
    "max_completion_tokens-0": invalid(body(max_completion_tokens=0)),
    "stream-yes": invalid(body(stream="yes")),
    "stream_options-not-object": invalid(body(stream_options=True)),
    "include_usage-string": invalid(body(stream_options={"include_usage": "true"})),
    "temperature-3": invalid(body(temperature=3)),
    "top_p-negative": invalid(body(top_p=-0.1)),
    "n-2": invalid(body(n=2)),
    "stop-17": invalid(body(stop=[f"s{i}" for i in range(17)])),
    # Mortar's headers
    "optimize-bogus": invalid(body(), **{"X-Mortar-Optimize": "bogus"}),
    "tool-select-bogus": invalid(tools(WEATHER), **{"X-Mortar-Tool-Select": "bogus"}),
    "tool-select-named-without-named-choice": invalid(
        tools(WEATHER, tool_choice="required"), **{"X-Mortar-Tool-Select": "named"}
    ),
    # size, model and context window
    "body-over-4-mib": bad(too_large(), 413, "request_too_large"),
    "unknown-model": bad(body(model="gpt-4o"), 404, "model_not_found"),
    "context-63-tokens-left": bad(prompt_leaving(63), 400, "context_length_exceeded"),
}


def post(
    server: ServerProcess, content: bytes, *, secret: str | None, headers: dict[str, str] | None
) -> httpx.Response:
    sent = {"Content-Type": "application/json", **(headers or {})}
    if secret is not None:
        sent["Authorization"] = f"Bearer {secret}"
    return httpx.post(
        f"{server.base_url}/v1/chat/completions", content=content, headers=sent, timeout=30
    )


def assert_error_envelope(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"] == "application/json"
    assert GENERATED_REQUEST_ID.fullmatch(response.headers["x-request-id"])
    envelope = orjson.loads(response.content)
    assert list(envelope) == ["error"]
    error = envelope["error"]
    assert sorted(error) == ["code", "message", "param", "type"]
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"].strip()
    assert error["type"] == ("authentication_error" if status == 401 else "invalid_request_error")
    assert error["param"] is None or isinstance(error["param"], str)
    return error


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_malformed_request_is_refused_and_recorded(
    mortar_server: ServerProcess, tenant: Tenant, case: BadRequest
) -> None:
    response = post(mortar_server, case.content, secret=tenant.secret, headers=case.headers)

    error = assert_error_envelope(response, case.status, case.code)
    run_id = response.headers["x-mortar-run-id"]
    assert RUN_ID.fullmatch(run_id)
    assert response.headers["x-mortar-request-id"] == run_id

    run = wait_for_run(run_id)
    assert run.status == Run.Status.REFUSED
    assert (run.http_status, run.error_code, run.error_message) == (
        case.status,
        case.code,
        error["message"],
    )
    assert (run.organization_id, run.api_key_id) == (tenant.organization.id, tenant.key.id)
    assert run.request_id == response.headers["x-request-id"]
    assert run.request_bytes == len(case.content)
    if case.status == 413:
        assert bytes(run.request_body) == case.content[:KEPT_BODY]
        assert run.request_truncated is True
    else:
        assert bytes(run.request_body) == case.content
        assert run.request_truncated is False
    assert stored_bytes(run) == response.content
    assert run.chunk_count == 1
    assert run.stream is None
    assert run.finished_at is not None


def test_the_413_keeps_only_the_first_64_kib_but_counts_every_byte(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    content = too_large()

    response = post(mortar_server, content, secret=tenant.secret, headers=None)

    assert_error_envelope(response, 413, "request_too_large")
    run = wait_for_run(response.headers["x-mortar-run-id"])
    assert (len(bytes(run.request_body)), run.request_bytes) == (65_536, 4_194_305)


def test_the_context_check_accepts_a_prompt_leaving_exactly_64_tokens(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    response = post(mortar_server, prompt_leaving(64), secret=tenant.secret, headers=None)

    assert response.status_code == 200, response.text[:500]
    completion = response.json()
    assert completion["usage"]["prompt_tokens"] == 4000
    assert completion["usage"]["completion_tokens"] == 64
    assert completion["choices"][0]["finish_reason"] == "length"
    run = wait_for_run(response.headers["x-mortar-run-id"])
    assert (run.status, run.max_tokens, run.prompt_tokens) == (Run.Status.COMPLETED, 64, 4000)


def test_a_client_request_id_is_echoed_on_a_refusal_and_stored(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    response = post(
        mortar_server, b"{", secret=tenant.secret, headers={"X-Request-Id": "client-req-7"}
    )

    assert response.status_code == 400
    assert response.headers["x-request-id"] == "client-req-7"
    assert wait_for_run(response.headers["x-mortar-run-id"]).request_id == "client-req-7"


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        pytest.param({}, "missing_key", id="no-key"),
        pytest.param({"Authorization": "Bearer"}, "missing_key", id="bearer-without-key"),
        pytest.param({"Authorization": "Bearer mk-not-a-real-key"}, "invalid_key", id="wrong-key"),
        pytest.param({"x-api-key": "mk-not-a-real-key"}, "invalid_key", id="wrong-x-api-key"),
    ],
)
def test_a_request_without_a_valid_key_is_refused_and_not_recorded(
    mortar_server: ServerProcess, tenant: Tenant, headers: dict[str, str], code: str
) -> None:
    runs_before = Run.objects.count()
    response = post(mortar_server, body(), secret=None, headers=headers)

    error = assert_error_envelope(response, 401, code)
    assert error["type"] == "authentication_error"
    # Not a run, so no run id is handed out.
    assert "x-mortar-run-id" not in response.headers
    assert "x-mortar-request-id" not in response.headers
    # The server writes runs in order, so once a later refusal is stored, this one would be too.
    later = post(mortar_server, b"{", secret=tenant.secret, headers=None)
    wait_for_run(later.headers["x-mortar-run-id"])
    assert Run.objects.count() == runs_before + 1


ODD_BUT_VALID = {
    "developer-role": (
        messages({"role": "developer", "content": "Be brief."}, USER),
        "You said: Hello",
    ),
    "text-parts-and-an-image": (
        messages(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "first"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "second"},
                ],
            }
        ),
        "You said: first\nsecond",
    ),
    "fields-null": (
        body(
            model=None,
            max_tokens=None,
            tools=None,
            tool_choice=None,
            parallel_tool_calls=None,
            stream_options=None,
            temperature=None,
            user=None,
        ),
        "You said: Hello",
    ),
    "unknown-field": (body(foo=1, functions=[{"name": "f"}]), "You said: Hello"),
    "user-a-number": (body(user=42), "You said: Hello"),
}


@pytest.mark.parametrize(("content", "reply"), ODD_BUT_VALID.values(), ids=ODD_BUT_VALID.keys())
def test_odd_but_valid_input_is_accepted(
    mortar_server: ServerProcess, tenant: Tenant, content: bytes, reply: str
) -> None:
    response = post(mortar_server, content, secret=tenant.secret, headers=None)

    assert response.status_code == 200, response.text[:500]
    assert response.headers["content-type"] == "application/json"
    assert GENERATED_REQUEST_ID.fullmatch(response.headers["x-request-id"])
    completion = response.json()
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": reply}
    assert completion["choices"][0]["finish_reason"] == "stop"
    run = wait_for_run(response.headers["x-mortar-run-id"])
    assert (run.status, run.http_status, run.error_code) == (Run.Status.COMPLETED, 200, "")
    assert bytes(run.request_body) == content


def test_a_user_that_is_not_a_string_names_no_session_and_no_end_user(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    response = post(mortar_server, body(user=42), secret=tenant.secret, headers=None)

    assert response.status_code == 200
    session = response.headers["x-mortar-session"]
    assert re.fullmatch(r"sess_[0-9a-f]{24}", session)
    run = wait_for_run(response.headers["x-mortar-run-id"])
    assert (run.session, run.end_user) == (session, "")


def test_a_null_stream_counts_as_absent_and_follows_the_accept_header(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    content = orjson.dumps({"messages": [USER], "stream": None})

    as_json = post(
        mortar_server, content, secret=tenant.secret, headers={"Accept": "application/json"}
    )
    as_sse = post(mortar_server, content, secret=tenant.secret, headers=None)

    assert as_json.status_code == as_sse.status_code == 200
    assert as_json.headers["content-type"] == "application/json"
    assert as_sse.headers["content-type"].startswith("text/event-stream")
    assert as_sse.text.endswith("data: [DONE]\n\n")


# A `model` holding a NUL character cannot be in the catalog (Postgres text holds no NUL): a 404
# `model_not_found` like any other. The second request checks that the refusal,
# once recorded, does not wedge the run writer: the error message quotes the name.
def test_a_model_name_with_a_nul_character_is_not_found(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    content = body(model="gpt-4o\u0000")

    response = post(mortar_server, content, secret=tenant.secret, headers=None)

    assert_error_envelope(response, 404, "model_not_found")
    run = wait_for_run(response.headers["x-mortar-run-id"])
    assert (run.status, run.http_status, run.error_code) == (
        Run.Status.REFUSED,
        404,
        "model_not_found",
    )
    assert bytes(run.request_body) == content
    assert stored_bytes(run) == response.content
    later = post(mortar_server, b"{", secret=tenant.secret, headers=None)
    assert wait_for_run(later.headers["x-mortar-run-id"]).error_code == "invalid_json"


# A prompt of a million spaces (1 MB, under the 4 MiB limit) once made the tokenizer panic; it is
# far over the 4,096-token window, so the answer is 400 `context_length_exceeded`.
def test_a_prompt_of_a_million_spaces_exceeds_the_context_window(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    content = messages({"role": "user", "content": " " * 1_000_000})

    response = post(mortar_server, content, secret=tenant.secret, headers=None)

    assert_error_envelope(response, 400, "context_length_exceeded")
    run = wait_for_run(response.headers["x-mortar-run-id"])
    assert (run.status, run.http_status) == (Run.Status.REFUSED, 400)
    assert stored_bytes(run) == response.content
