"""The API's one way in (`core.http.dispatch`), on real server processes.

Each route answers in the envelope its router declares, whatever made the answer. Every /v1/
route — each of the API's URL patterns — is answered without Django's middleware: no
session or CSRF cookie, no `Vary: Cookie`, none of the security and clickjacking headers, while
the dashboard, on Django's handler, keeps them. The same application on daphne answers the
bad-input table, a completion, a stream, a hang-up and a replay as it does on uvicorn: the
dispatch depends on no one server's way of delivering a body or a disconnect.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from config.api import API_PREFIX, api, api_patterns
from core.http.envelopes import MORTAR_ENVELOPE
from core.http.routes import api_routes
from gateway.surfaces.messages.envelope import ANTHROPIC_ENVELOPE
from replay.envelope import FLAT_ENVELOPE
from telemetry.models import Run
from tests.conftest import Tenant, _server_env, stored_bytes, wait_for_run
from tests.gateway.test_bad_input import CASES, BadRequest, post
from tests.support.servers import ServerProcess, start_mortar, stream_completion

pytestmark = pytest.mark.django_db

ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?\w+>")
REQUEST_ID = re.compile(r"req_[0-9a-f]{24}")
# What only Django's middleware adds: SecurityMiddleware's and the clickjacking headers (the
# session and CSRF ones, cookies and `Vary: Cookie`, are checked apart).
DJANGO_MIDDLEWARE_HEADERS = (
    "x-frame-options",
    "x-content-type-options",
    "referrer-policy",
    "cross-origin-opener-policy",
)
# What differs from one request to the next: ids, and how long the optimizer took.
IDS = re.compile(r"\b(?:chatcmpl-|req_|sess_)[0-9a-f]{24}\b")
ELAPSED = re.compile(r"elapsed_us=\d+")
QUESTION = [{"role": "user", "content": "What does max_tokens limit?"}]


def api_paths() -> list[str]:
    """A path for each of the API's URL patterns, each parameter filled in."""
    return [
        API_PREFIX + ROUTE_PARAMETER.sub("chatcmpl-0", str(pattern.pattern))
        for pattern in api_patterns()
    ]


def assert_no_django_middleware(response: httpx.Response) -> None:
    assert "set-cookie" not in response.headers, response.headers
    assert "cookie" not in response.headers.get("vary", "").lower(), response.headers
    assert not set(DJANGO_MIDDLEWARE_HEADERS) & set(response.headers), response.headers


def test_the_patterns_cover_every_documented_operation(mortar_server: ServerProcess) -> None:
    document = httpx.get(f"{mortar_server.base_url}/v1/openapi.json", timeout=10).json()
    documented = {re.sub(r"\{\w+\}", "chatcmpl-0", path) for path in document["paths"]}

    served = set(api_paths())
    assert documented <= served
    assert served - documented == {"/v1/openapi.json", "/v1/docs", "/v1/"}


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("path", api_paths())
def test_every_api_route_answers_without_djangos_middleware(
    mortar_server: ServerProcess, path: str, method: str
) -> None:
    response = httpx.request(method, f"{mortar_server.base_url}{path}", timeout=30)

    assert response.status_code < 500, response.text
    assert REQUEST_ID.fullmatch(response.headers["x-request-id"])
    assert_no_django_middleware(response)


def test_an_answer_with_a_key_carries_no_djangos_middleware_either(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    response = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        json={"messages": QUESTION, "stream": False},
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )

    assert response.status_code == 200
    assert_no_django_middleware(response)


def test_the_dashboard_keeps_djangos_middleware(mortar_server: ServerProcess) -> None:
    response = httpx.get(f"{mortar_server.base_url}/dashboard/login/", timeout=30)

    assert response.status_code == 200
    assert response.headers["set-cookie"].startswith("csrftoken=")
    assert "cookie" in response.headers["vary"].lower()
    assert response.headers["x-frame-options"] == "DENY"
    assert set(DJANGO_MIDDLEWARE_HEADERS) <= set(response.headers)
    assert REQUEST_ID.fullmatch(response.headers["x-request-id"])


def test_each_pattern_has_the_envelope_its_router_declares() -> None:
    envelopes = {
        str(route.pattern.pattern): route.envelope
        for route in api_routes(api_patterns(), api.mounts, MORTAR_ENVELOPE)
    }

    assert envelopes == {
        "openapi.json": MORTAR_ENVELOPE,
        "docs": MORTAR_ENVELOPE,
        "chat/completions": MORTAR_ENVELOPE,
        "chat/completions/runs/<run_id>/rerun": MORTAR_ENVELOPE,
        "generations/<run_id>/stop": MORTAR_ENVELOPE,
        "models": MORTAR_ENVELOPE,
        "budget": MORTAR_ENVELOPE,
        "messages": ANTHROPIC_ENVELOPE,
        "messages/count_tokens": ANTHROPIC_ENVELOPE,
        "telemetry/stream": MORTAR_ENVELOPE,
        "chat/completions/runs/<run_id>": FLAT_ENVELOPE,
        "": MORTAR_ENVELOPE,
    }


def mortar_error(body: Any) -> str:
    assert list(body) == ["error"] and sorted(body["error"]) == ["code", "message", "param", "type"]
    return str(body["error"]["code"])


def anthropic_error(body: Any) -> str:
    assert list(body) == ["type", "error"] and sorted(body["error"]) == ["message", "type"]
    return str(body["error"]["type"])


def flat_error(body: Any) -> str:
    assert sorted(body) == ["code", "error"] and isinstance(body["error"], str)
    return str(body["code"])


@pytest.mark.parametrize(
    ("method", "path", "status", "read", "expected"),
    [
        ("POST", "/v1/chat/completions/runs/chatcmpl-0", 405, flat_error, "method_not_allowed"),
        ("GET", "/v1/chat/completions/runs/chatcmpl-0/x", 404, mortar_error, "not_found"),
        (
            "GET",
            "/v1/chat/completions/runs/chatcmpl-0/rerun",
            405,
            mortar_error,
            "method_not_allowed",
        ),
        ("GET", "/v1/messages/count_tokens", 405, anthropic_error, "invalid_request_error"),
        ("GET", "/v1/messages/count_tokens/x", 404, anthropic_error, "not_found_error"),
        ("GET", "/v1/messagesx", 404, mortar_error, "not_found"),
        ("POST", "/v1/telemetry/stream", 405, mortar_error, "method_not_allowed"),
        ("GET", "/v1/telemetry/x", 404, mortar_error, "not_found"),
        ("GET", "/v1/", 404, mortar_error, "not_found"),
    ],
)
def test_an_answer_no_operation_made_is_in_its_routers_envelope(
    mortar_server: ServerProcess,
    method: str,
    path: str,
    status: int,
    read: Any,
    expected: str,
) -> None:
    response = httpx.request(method, f"{mortar_server.base_url}{path}", timeout=30)

    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert read(response.json()) == expected
    assert ("allow" in response.headers) == (status == 405)
    assert (response.headers.get("request-id") == response.headers["x-request-id"]) == (
        read is anthropic_error
    )


@pytest.fixture(scope="module")
def daphne_server(
    mortar_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The same application on daphne, on the same database and Redis."""
    server = start_mortar(_server_env(), log_dir=tmp_path_factory.mktemp("daphne"), server="daphne")
    yield server
    server.stop()


def masked(text: str) -> str:
    return ELAPSED.sub("elapsed_us=…", IDS.sub("<id>", text))


def answer(response: httpx.Response) -> dict[str, Any]:
    """What must be the same on either server: status, the body, and Mortar's headers."""
    headers = {
        name: masked(value)
        for name, value in response.headers.items()
        if name.startswith("x-mortar-") or name in ("content-type", "x-request-id", "allow")
    }
    return {"status": response.status_code, "headers": headers, "body": masked(response.text)}


def recorded(run_id: str) -> dict[str, Any]:
    run = wait_for_run(run_id)
    return {
        "status": run.status,
        "http_status": run.http_status,
        "error": (run.error_code, masked(run.error_message)),
        "request": (bytes(run.request_body), run.request_bytes, run.request_truncated),
        "stream": run.stream,
        "chunks": masked(stored_bytes(run).decode()),
    }


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_malformed_request_gets_the_same_answer_on_daphne(
    mortar_server: ServerProcess, daphne_server: ServerProcess, tenant: Tenant, case: BadRequest
) -> None:
    uvicorn = post(mortar_server, case.content, secret=tenant.secret, headers=case.headers)
    daphne = post(daphne_server, case.content, secret=tenant.secret, headers=case.headers)

    assert (daphne.status_code, daphne.json()["error"]["code"]) == (case.status, case.code)
    assert answer(daphne) == answer(uvicorn)
    assert recorded(daphne.headers["x-mortar-run-id"]) == recorded(
        uvicorn.headers["x-mortar-run-id"]
    )
    assert_no_django_middleware(daphne)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/chat/completions"),
        ("POST", "/v1/nowhere"),
        ("GET", "/v1/messages"),
        ("POST", "/v1/messages/nowhere"),
        ("DELETE", "/v1/telemetry/stream"),
    ],
)
def test_routes_and_methods_there_are_not_get_the_same_answer_on_daphne(
    mortar_server: ServerProcess, daphne_server: ServerProcess, method: str, path: str
) -> None:
    uvicorn = httpx.request(method, f"{mortar_server.base_url}{path}", timeout=30)
    daphne = httpx.request(method, f"{daphne_server.base_url}{path}", timeout=30)

    assert daphne.status_code in (404, 405)
    assert answer(daphne) == answer(uvicorn)
    if path.startswith("/v1/messages"):  # Anthropic's `request-id` beside ours
        assert daphne.headers["request-id"] == daphne.headers["x-request-id"]
    else:
        assert "request-id" not in daphne.headers


def sdk(server: ServerProcess, tenant: Tenant) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=tenant.secret, max_retries=0)


def test_a_streamed_completion_with_usage_is_the_same_on_daphne(
    mortar_server: ServerProcess, daphne_server: ServerProcess, tenant: Tenant
) -> None:
    streams = {}
    for name, server in (("uvicorn", mortar_server), ("daphne", daphne_server)):
        chunks = list(
            sdk(server, tenant).chat.completions.create(
                model="Qwen/Qwen2.5-7B-Instruct",
                messages=QUESTION,
                max_tokens=200,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        run = wait_for_run(chunks[0].id)
        assert (run.status, run.http_status, run.stream) == (Run.Status.COMPLETED, 200, True)
        # Every event the client got, [DONE] included, is a stored chunk.
        assert run.chunk_count == len(chunks) + 1
        streams[name] = [chunk.model_dump(exclude={"id", "created"}) for chunk in chunks]

    assert streams["daphne"] == streams["uvicorn"]
    assert streams["daphne"][-1]["usage"]["total_tokens"] > 0


def test_a_client_that_hangs_up_mid_stream_on_daphne_cancels_its_run(
    daphne_server: ServerProcess, tenant: Tenant, slow_model: str
) -> None:
    body = {"model": slow_model, "messages": [{"role": "user", "content": "one two " * 20}]}

    with stream_completion(daphne_server, tenant.secret, body) as response:
        run_id = response.headers["X-Mortar-Run-Id"]
        first = next(response.iter_raw())
        # Hang up after the first event, while the 200 ms pieces are still coming.

    assert orjson.loads(first.split(b"\n")[0][6:])["choices"][0]["delta"] == {"role": "assistant"}
    run = wait_for_run(run_id)
    assert (run.status, run.error_code) == (Run.Status.CANCELLED, "client_disconnected")
    assert run.finished_at is not None


def test_a_run_replays_on_daphne_as_its_client_received_it(
    daphne_server: ServerProcess, tenant: Tenant
) -> None:
    body = {"messages": QUESTION}
    with stream_completion(daphne_server, tenant.secret, body) as response:
        run_id = response.headers["X-Mortar-Run-Id"]
        received = b"".join(response.iter_raw())
    wait_for_run(run_id)

    replayed = httpx.get(
        f"{daphne_server.base_url}/v1/chat/completions/runs/{run_id}",
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )

    assert replayed.status_code == 200
    assert replayed.headers["content-type"] == "text/event-stream"
    assert re.sub(rb"^id: \d+\n", b"", replayed.content, flags=re.MULTILINE) == received
