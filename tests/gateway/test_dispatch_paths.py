"""Both HTTP paths into `POST /v1/chat/completions` answer alike.

The lean ASGI dispatch (the default) and Django's handler (`MORTAR_LEAN_DISPATCH=false`) call
the same ninja operation (config/asgi.py). The whole bad-input table goes through both, and must
get the same status, envelope, `X-Mortar-*` headers and recorded run; a completion, a streamed
completion with usage, and a client that hangs up mid-stream prove Django's path serves streams
(its `EventStreamResponse.close()` → `finished()`) as the lean dispatch does.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai
import orjson
import pytest

from telemetry.models import Run
from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.gateway.test_bad_input import CASES, BadRequest, post
from tests.support.servers import ServerProcess, stream_completion

pytestmark = pytest.mark.django_db

# What differs from one request to the next: ids, and how long the optimizer took.
IDS = re.compile(r"\b(?:chatcmpl-|req_|sess_)[0-9a-f]{24}\b")
ELAPSED = re.compile(r"elapsed_us=\d+")
# Django's handler runs the whole middleware chain; these headers come only from it.
DJANGO_ONLY_HEADER = "x-frame-options"

QUESTION = [{"role": "user", "content": "What does max_tokens limit?"}]


def masked(text: str) -> str:
    return ELAPSED.sub("elapsed_us=…", IDS.sub("<id>", text))


def answer(response: httpx.Response) -> dict[str, Any]:
    """What must be the same on either path: status, the body, and Mortar's headers."""
    headers = {
        name: masked(value)
        for name, value in response.headers.items()
        if name.startswith("x-mortar-") or name in ("content-type", "x-request-id")
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


def test_the_django_server_serves_chat_completions_through_djangos_handler(
    mortar_server: ServerProcess, django_dispatch_server: ServerProcess, tenant: Tenant
) -> None:
    lean = post(mortar_server, b"{", secret=tenant.secret, headers=None)
    django = post(django_dispatch_server, b"{", secret=tenant.secret, headers=None)

    assert DJANGO_ONLY_HEADER not in lean.headers
    assert DJANGO_ONLY_HEADER in django.headers


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_malformed_request_gets_the_same_answer_on_both_paths(
    mortar_server: ServerProcess,
    django_dispatch_server: ServerProcess,
    tenant: Tenant,
    case: BadRequest,
) -> None:
    lean = post(mortar_server, case.content, secret=tenant.secret, headers=case.headers)
    django = post(django_dispatch_server, case.content, secret=tenant.secret, headers=case.headers)

    assert (lean.status_code, lean.json()["error"]["code"]) == (case.status, case.code)
    assert answer(django) == answer(lean)
    assert recorded(django.headers["x-mortar-run-id"]) == recorded(lean.headers["x-mortar-run-id"])


def sdk(server: ServerProcess, tenant: Tenant) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=tenant.secret, max_retries=0)


def test_a_completion_is_the_same_on_both_paths(
    mortar_server: ServerProcess, django_dispatch_server: ServerProcess, tenant: Tenant
) -> None:
    replies = {}
    for name, server in (("lean", mortar_server), ("django", django_dispatch_server)):
        raw = sdk(server, tenant).chat.completions.with_raw_response.create(
            model="Qwen/Qwen2.5-7B-Instruct", messages=QUESTION, max_tokens=200, stream=False
        )
        completion = raw.parse()
        run = wait_for_run(completion.id)
        assert raw.headers["x-mortar-run-id"] == completion.id
        assert (run.status, run.http_status, run.stream) == (Run.Status.COMPLETED, 200, False)
        replies[name] = {
            "headers": answer(raw.http_response)["headers"],
            "reply": completion.model_dump(exclude={"id", "created"}),
        }

    assert replies["django"] == replies["lean"]
    assert replies["django"]["reply"]["choices"][0]["finish_reason"] == "stop"


def test_a_streamed_completion_with_usage_is_the_same_on_both_paths(
    mortar_server: ServerProcess, django_dispatch_server: ServerProcess, tenant: Tenant
) -> None:
    streams = {}
    for name, server in (("lean", mortar_server), ("django", django_dispatch_server)):
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

    assert streams["django"] == streams["lean"]
    usage = streams["django"][-1]
    assert (usage["choices"], usage["usage"]["total_tokens"] > 0) == ([], True)
    assert streams["django"][-2]["choices"][0]["finish_reason"] == "stop"


def test_a_client_that_hangs_up_mid_stream_on_djangos_path_cancels_its_run(
    django_dispatch_server: ServerProcess, tenant: Tenant, slow_model: str
) -> None:
    body = {"model": slow_model, "messages": [{"role": "user", "content": "one two " * 20}]}

    with stream_completion(django_dispatch_server, tenant.secret, body) as response:
        run_id = response.headers["X-Mortar-Run-Id"]
        first = next(response.iter_raw())
        # Hang up after the first event, while the 200 ms pieces are still coming.

    assert first.startswith(b"data: ")
    assert orjson.loads(first.split(b"\n")[0][6:])["choices"][0]["delta"] == {"role": "assistant"}
    run = wait_for_run(run_id)
    assert (run.status, run.error_code) == (Run.Status.CANCELLED, "client_disconnected")
    assert run.finished_at is not None
