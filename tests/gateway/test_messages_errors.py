"""The Messages route's errors: Anthropic's envelope, no `code`, the status → type table, and a
`request-id` header beside `X-Request-Id` — on a real server process."""

from __future__ import annotations

import anthropic
import httpx
import orjson
import pytest

from core.errors import HttpStatusError, MortarError
from gateway.errors import UpstreamRejected
from gateway.surfaces.messages.envelope import ANTHROPIC_ENVELOPE, ERROR_TYPES
from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair

pytestmark = pytest.mark.django_db

MODEL = "Qwen/Qwen2.5-7B-Instruct"
# A real 1x1 PNG, canonical base64.
PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
    "AAAABJRU5ErkJggg=="
)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def post(
    server: ServerProcess, tenant: Tenant | None, body: dict | bytes, **headers: str
) -> httpx.Response:
    sent = {} if tenant is None else {"x-api-key": tenant.secret}
    return httpx.post(
        f"{server.base_url}/v1/messages",
        content=body if isinstance(body, bytes) else orjson.dumps(body),
        headers={**sent, **headers},
        timeout=30,
    )


def assert_anthropic_error(response: httpx.Response, status: int, error_type: str) -> str:
    """The response is Anthropic's envelope for `status`, without a code; its message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}  # no `code`, no `param`
    assert body["error"]["type"] == error_type
    assert response.headers["request-id"] == response.headers["X-Request-Id"]
    assert body["error"]["message"]
    return body["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "The request body is not valid JSON"),
        ({"model": MODEL, "messages": ask("Hi")}, "`max_tokens` is required."),
        (
            {"model": MODEL, "max_tokens": 0, "messages": ask("Hi")},
            "`max_tokens` must be a positive whole number.",
        ),
        (
            {"model": MODEL, "max_tokens": "100", "messages": ask("Hi")},
            "`max_tokens` must be a positive whole number.",
        ),
        ({"max_tokens": 10, "messages": ask("Hi")}, "`model` is required."),
        (
            {"model": MODEL, "max_tokens": 10, "messages": [{"role": "system", "content": "x"}]},
            "`messages[0].role` is 'system'; use user or assistant",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            },
            "`messages[0].content[0].type` 'document' cannot be used here",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 10,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "url", "url": "https://example.com/a.png"},
                            }
                        ],
                    }
                ],
            },
            "`messages[0].content[0].source.type` must be `base64`",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 10,
                "messages": ask("Hi"),
                "tool_choice": {"type": "auto"},
            },
            "`tool_choice` needs `tools`.",
        ),
        (
            {"model": MODEL, "max_tokens": 10, "messages": ask("Hi"), "temperature": 1.5},
            "`temperature` must be between 0 and 1.",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 2000,
                "messages": ask("Hi"),
                "thinking": {"type": "enabled", "budget_tokens": 4000},
            },
            "`thinking.budget_tokens` must be less than `max_tokens` (2000).",
        ),
    ],
    ids=[
        "json",
        "no-max-tokens",
        "zero-max-tokens",
        "string-max-tokens",
        "no-model",
        "system-role",
        "unknown-block",
        "image-url",
        "tool-choice-without-tools",
        "temperature",
        "thinking-budget",
    ],
)
def test_a_bad_body_is_a_400_invalid_request_error(
    mortar_server: ServerProcess, tenant: Tenant, body: dict | bytes, message: str
) -> None:
    response = post(mortar_server, tenant, body)
    assert message in assert_anthropic_error(response, 400, "invalid_request_error")
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert run.pk.startswith("msg_")
    assert (run.status, run.http_status) == ("refused", 400)
    assert stored_bytes(run) == response.content


def test_unknown_fields_are_ignored(mortar_server: ServerProcess, tenant: Tenant) -> None:
    response = post(
        mortar_server,
        tenant,
        {
            "model": MODEL,
            "max_tokens": 200,
            "messages": ask("Hi"),
            "service_tier": "auto",
            "container": None,
            "top_k": 5,
        },
    )
    assert response.status_code == 200
    assert response.json()["content"] == [{"type": "text", "text": "You said: Hi"}]


def test_an_image_for_a_model_without_vision_is_a_400(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1},
    }
    response = post(
        mortar_server,
        tenant,
        {
            "model": MODEL,
            "max_tokens": 10,
            "messages": [{"role": "user", "content": [image, {"type": "text", "text": "What?"}]}],
        },
    )
    message = assert_anthropic_error(response, 400, "invalid_request_error")
    assert message.startswith(f"The model `{MODEL}` does not read images")


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "No API key was presented."),
        ({"x-api-key": "mk-not-a-key"}, "The API key is not valid or has been revoked."),
        (
            {"Authorization": "Bearer mk-not-a-key"},
            "The API key is not valid or has been revoked.",
        ),
    ],
    ids=["missing", "wrong-x-api-key", "wrong-bearer"],
)
def test_auth_failures_are_401_authentication_error(
    mortar_server: ServerProcess, headers: dict[str, str], message: str
) -> None:
    response = post(
        mortar_server, None, {"model": MODEL, "max_tokens": 10, "messages": ask("Hi")}, **headers
    )
    assert message in assert_anthropic_error(response, 401, "authentication_error")


def test_count_tokens_errors_are_anthropics_too(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    unauthorized = httpx.post(
        f"{mortar_server.base_url}/v1/messages/count_tokens",
        content=orjson.dumps({"model": MODEL, "messages": ask("Hi")}),
        timeout=30,
    )
    assert_anthropic_error(unauthorized, 401, "authentication_error")
    invalid = httpx.post(
        f"{mortar_server.base_url}/v1/messages/count_tokens",
        content=orjson.dumps({"model": MODEL, "messages": []}),
        headers={"x-api-key": tenant.secret},
        timeout=30,
    )
    message = assert_anthropic_error(invalid, 400, "invalid_request_error")
    assert message == "`messages` must hold at least one message."
    unknown = httpx.post(
        f"{mortar_server.base_url}/v1/messages/count_tokens",
        content=orjson.dumps({"model": "claude-opus-4", "messages": ask("Hi")}),
        headers={"x-api-key": tenant.secret},
        timeout=30,
    )
    assert_anthropic_error(unknown, 404, "not_found_error")


def test_an_unknown_model_is_a_404_not_found_error(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    response = post(
        mortar_server, tenant, {"model": "claude-opus-4", "max_tokens": 10, "messages": ask("Hi")}
    )
    message = assert_anthropic_error(response, 404, "not_found_error")
    assert message == "The model `claude-opus-4` does not exist."


def test_routes_and_methods_the_route_lacks_answer_in_its_envelope(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    headers = {"x-api-key": tenant.secret}
    missing = httpx.post(f"{mortar_server.base_url}/v1/messages/batches", headers=headers)
    assert_anthropic_error(missing, 404, "not_found_error")
    wrong_method = httpx.get(f"{mortar_server.base_url}/v1/messages", headers=headers)
    assert_anthropic_error(wrong_method, 405, "invalid_request_error")
    # The chat route keeps its own envelope.
    chat = httpx.get(f"{mortar_server.base_url}/v1/chat/completions", headers=headers)
    assert chat.json()["error"]["code"] == "method_not_allowed"
    assert "request-id" not in chat.headers


def test_a_body_over_4_mib_is_a_413_request_too_large(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": ask("x" * (4 * 1024 * 1024))}
    response = post(mortar_server, tenant, body)
    assert_anthropic_error(response, 413, "request_too_large")


@pytest.mark.parametrize(
    ("model", "text", "status", "error_type"),
    [
        ("mock-one", "[mock fault=status status=402]", 402, "billing_error"),
        ("mock-one", "[mock fault=status status=403]", 403, "permission_error"),
        ("mock-one", "[mock fault=status status=429]", 429, "rate_limit_error"),
        ("mock-one", "[mock fault=error400]", 400, "invalid_request_error"),
        ("mock-one", "[mock fault=error500]", 502, "api_error"),
        ("mock-dead", "Hi", 503, "overloaded_error"),
        ("mock-one", "[mock fault=hang]", 504, "timeout_error"),
    ],
    ids=["402", "403", "429", "upstream-400", "502", "503", "504"],
)
def test_model_server_faults_follow_the_table(
    mortar_server: ServerProcess,
    tenant: Tenant,
    upstream_models: MockPair,
    model: str,
    text: str,
    status: int,
    error_type: str,
) -> None:
    response = post(
        mortar_server, tenant, {"model": model, "max_tokens": 10, "messages": ask(text)}
    )
    assert_anthropic_error(response, status, error_type)
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert run.http_status == status
    assert stored_bytes(run) == response.content


def test_a_model_in_the_catalog_but_not_deployed_is_a_503_overloaded_error(
    mortar_server: ServerProcess, tenant: Tenant, undeployed_model: str
) -> None:
    response = post(
        mortar_server, tenant, {"model": undeployed_model, "max_tokens": 10, "messages": ask("Hi")}
    )
    assert_anthropic_error(response, 503, "overloaded_error")


def test_an_error_after_the_stream_started_is_one_error_event(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair
) -> None:
    received = b""
    with httpx.stream(
        "POST",
        f"{mortar_server.base_url}/v1/messages",
        content=orjson.dumps(
            {
                "model": "mock-one",
                "max_tokens": 100,
                "stream": True,
                "messages": ask("[mock fault=drop chunks=10]"),
            }
        ),
        headers={"x-api-key": tenant.secret},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["request-id"] == response.headers["X-Request-Id"]
        run_id = response.headers["X-Mortar-Run-Id"]
        for raw in response.iter_raw():
            received += raw

    events = [event for event in received.split(b"\n\n") if event]
    assert events[0].startswith(b"event: message_start\n")
    name, data = events[-1].split(b"\n")
    assert name == b"event: error"
    error = orjson.loads(data[6:])
    assert set(error) == {"type", "error"} and set(error["error"]) == {"type", "message"}
    assert error["error"]["type"] == "api_error"
    assert b"message_stop" not in received
    run = wait_for_run(run_id)
    assert (run.status, run.error_code) == ("failed", "upstream_error")
    assert stored_bytes(run) == received


def test_the_sdk_raises_on_an_error_event(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair
) -> None:
    client = anthropic.Anthropic(
        base_url=mortar_server.base_url, api_key=tenant.secret, max_retries=0
    )
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        client.messages.stream(
            model="mock-one", max_tokens=100, messages=ask("[mock fault=drop chunks=10]")
        ) as stream,
    ):
        for _ in stream.text_stream:
            pass
    assert caught.value.body["error"]["type"] == "api_error"


@pytest.mark.parametrize("status", sorted({*ERROR_TYPES, 405, 409, 410, 501}))
def test_every_status_has_its_anthropic_type_and_no_code(status: int) -> None:
    error: MortarError = (
        UpstreamRejected("refused", status=status)
        if status < 500
        else HttpStatusError("failed", status=status)
    )
    body = ANTHROPIC_ENVELOPE.body(error)
    expected = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    assert body == {"type": "error", "error": {"type": expected, "message": error.message}}


def test_the_status_table_is_anthropics() -> None:
    assert ERROR_TYPES == {
        400: "invalid_request_error",
        401: "authentication_error",
        402: "billing_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        502: "api_error",
        503: "overloaded_error",
        504: "timeout_error",
        529: "overloaded_error",
    }
    assert ANTHROPIC_ENVELOPE.body(MortarError("boom"))["error"]["type"] == "api_error"
