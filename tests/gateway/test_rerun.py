"""`POST /v1/chat/completions/runs/{id}/rerun` against a real server and the mock model server:
a stored run's request sent again — as it was, with fields replaced, to another model — as a new
run that records its origin; another organization's run, an unknown one and one whose request
was not kept are gone (410); bad overrides are refused like a bad body."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import orjson
import pytest
from openai import OpenAI

from accounts.models import Organization
from accounts.services import key_create
from telemetry.models import Run, RunImage
from tests.conftest import Tenant, wait_for_run
from tests.support.catalog import SurfaceModels
from tests.support.images import data_url, image_bytes, image_part, text_part
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair, mock_requests, mock_reset

pytestmark = pytest.mark.django_db

QUESTION = [{"role": "user", "content": "What does max_tokens limit? [mock chunks=4]"}]


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def original_run(server: ServerProcess, secret: str, **fields: object) -> str:
    """A completion sent as a client would; its run id, once it is stored."""
    body = {"messages": QUESTION, "stream": False, **fields}
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=auth(secret), timeout=30
    )
    assert response.status_code == 200, response.text
    run_id = response.headers["X-Mortar-Run-Id"]
    wait_for_run(run_id)
    return run_id


def rerun(
    server: ServerProcess, secret: str, run_id: str, overrides: object = None
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions/runs/{run_id}/rerun",
        content=b"" if overrides is None else orjson.dumps(overrides),
        headers={**auth(secret), "Content-Type": "application/json"},
        timeout=30,
    )


def test_a_run_is_sent_again_as_it_was_as_a_new_run_that_names_it(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair
) -> None:
    original = original_run(mortar_server, tenant.secret, model="mock-one", temperature=0.7)
    mock_reset(upstream_models.a)

    response = rerun(mortar_server, tenant.secret, original)

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")  # stream: false
    new_id = response.headers["X-Mortar-Run-Id"]
    assert new_id != original and response.json()["id"] == new_id
    assert response.json()["choices"][0]["message"]["content"]
    sent = [entry["body"] for entry in mock_requests(upstream_models.a)]
    assert len(sent) == 1
    assert sent[0]["messages"] == QUESTION and sent[0]["temperature"] == 0.7
    stored, first = wait_for_run(new_id), Run.objects.get(pk=original)
    assert stored.rerun_of == original and first.rerun_of is None
    assert bytes(stored.request_body) == bytes(first.request_body)
    assert (stored.model, stored.organization_id, stored.status) == (
        "mock-one",
        tenant.organization.id,
        Run.Status.COMPLETED,
    )


def test_overrides_replace_the_stored_fields_and_can_ask_for_a_stream(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair
) -> None:
    original = original_run(mortar_server, tenant.secret, model="mock-one", temperature=0.7)
    mock_reset(upstream_models.a)
    edited = [{"role": "user", "content": "Say it in one line. [mock chunks=3]"}]

    response = rerun(
        mortar_server,
        tenant.secret,
        original,
        {"messages": edited, "temperature": None, "top_p": 0.5, "stream": True},
    )

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    new_id = json.loads(lines[0][6:])["id"]
    (sent,) = [entry["body"] for entry in mock_requests(upstream_models.a)]
    assert sent["messages"] == edited
    assert sent["top_p"] == 0.5 and "temperature" not in sent  # null removes a field
    stored = wait_for_run(new_id)
    assert stored.rerun_of == original and stored.stream is True
    assert orjson.loads(bytes(stored.request_body))["messages"] == edited


def test_a_run_is_sent_again_to_another_model_with_the_openai_sdk(
    mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair
) -> None:
    original = original_run(mortar_server, tenant.secret)  # the scripted default model
    mock_reset(upstream_models.a)
    client = OpenAI(base_url=f"{mortar_server.base_url}/v1", api_key=tenant.secret)

    reply = client.post(
        f"/chat/completions/runs/{original}/rerun",
        body={"model": "mock-one"},
        cast_to=httpx.Response,
    )

    body = reply.json()
    assert body["model"] == "mock-one" and body["object"] == "chat.completion"
    (sent,) = [entry["body"] for entry in mock_requests(upstream_models.a)]
    assert sent["messages"] == QUESTION and sent["model"] == "mock-upstream-name"
    stored = wait_for_run(body["id"])
    assert (stored.rerun_of, stored.model, stored.deployment) == (original, "mock-one", "mock-one")
    assert Run.objects.get(pk=original).model != "mock-one"


def test_another_organizations_run_is_gone(
    mortar_server: ServerProcess, tenant: Tenant, other_tenant: Tenant
) -> None:
    theirs = original_run(mortar_server, other_tenant.secret)

    response = rerun(mortar_server, tenant.secret, theirs, {"temperature": 0.1})

    assert response.status_code == 410
    assert response.json() == {
        "error": {
            "message": f"Run {theirs} is gone: unknown, expired, or not this organization's.",
            "type": "invalid_request_error",
            "param": None,
            "code": "run_gone",
        }
    }
    assert not Run.objects.filter(rerun_of=theirs).exists()
    # Its own organization may.
    assert rerun(mortar_server, other_tenant.secret, theirs).status_code == 200


def test_an_unknown_run_is_gone(mortar_server: ServerProcess, tenant: Tenant) -> None:
    missing = f"chatcmpl-{uuid.uuid4().hex[:24]}"

    response = rerun(mortar_server, tenant.secret, missing)

    assert response.status_code == 410
    assert response.json()["error"]["code"] == "run_gone"
    assert not Run.objects.filter(rerun_of=missing).exists()


@pytest.fixture(scope="module")
def metadata_tenant(
    django_db_setup: None, django_db_blocker, sees_other_connections: None
) -> Tenant:
    with django_db_blocker.unblock():
        organization = Organization.objects.create(
            name=f"metadata-{uuid.uuid4().hex[:8]}", retention=Organization.Retention.METADATA
        )
        issued = key_create(organization=organization, name="tests")
    return Tenant(organization=organization, key=issued.key, secret=issued.secret)


def test_a_run_whose_request_was_not_kept_cannot_be_sent_again(
    mortar_server: ServerProcess, metadata_tenant: Tenant
) -> None:
    original = original_run(mortar_server, metadata_tenant.secret)

    response = rerun(mortar_server, metadata_tenant.secret, original)

    assert response.status_code == 410
    error = response.json()["error"]
    assert error["code"] == "request_not_kept"
    assert "retention=metadata" in error["message"]
    assert not Run.objects.filter(rerun_of=original).exists()


def test_bad_overrides_are_refused_as_a_bad_body_is_and_recorded(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    original = original_run(mortar_server, tenant.secret)

    out_of_range = rerun(mortar_server, tenant.secret, original, {"temperature": 5})
    not_an_object = rerun(mortar_server, tenant.secret, original, [1, 2])

    assert out_of_range.status_code == 400
    assert out_of_range.json()["error"]["code"] == "invalid_parameter"
    assert out_of_range.json()["error"]["param"] == "temperature"
    refused = wait_for_run(out_of_range.headers["X-Mortar-Run-Id"])
    assert (refused.rerun_of, refused.status) == (original, Run.Status.REFUSED)
    assert not_an_object.status_code == 400
    assert not_an_object.json()["error"]["code"] == "invalid_json"


def test_a_messages_run_is_sent_again_on_the_messages_route(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    sent = httpx.post(
        f"{mortar_server.base_url}/v1/messages",
        json={
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "What does max_tokens limit?"}],
        },
        headers={"x-api-key": tenant.secret, "anthropic-version": "2023-06-01"},
        timeout=30,
    )
    assert sent.status_code == 200, sent.text
    original = sent.json()["id"]
    wait_for_run(original)

    response = rerun(mortar_server, tenant.secret, original, {"max_tokens": 5})

    assert response.status_code == 200, response.text
    message = response.json()
    assert message["type"] == "message" and message["id"].startswith("msg_")
    assert message["id"] != original
    assert message["stop_reason"] == "max_tokens" and message["usage"]["output_tokens"] == 5
    stored = wait_for_run(message["id"])
    assert stored.rerun_of == original
    assert orjson.loads(bytes(stored.request_body))["max_tokens"] == 5


def images_of(run_id: str) -> list[int]:
    """The run's stored images (their ids), once the writer has stored them."""
    for _ in range(100):
        found = list(RunImage.objects.filter(run_id=run_id).values_list("image_id", flat=True))
        if found:
            return found
        time.sleep(0.05)
    return []


def test_a_request_s_images_are_sent_again_as_received(
    mortar_server: ServerProcess, tenant: Tenant, surface_models: SurfaceModels
) -> None:
    url = data_url(image_bytes("image/png", (64, 48)))
    content = [text_part("What is in this picture?"), image_part(url)]
    original = original_run(
        mortar_server,
        tenant.secret,
        model=surface_models.vision,
        messages=[{"role": "user", "content": content}],
    )
    (image,) = images_of(original)
    assert url.encode() not in bytes(Run.objects.get(pk=original).request_body)  # a reference

    response = rerun(mortar_server, tenant.secret, original)

    assert response.status_code == 200, response.text
    stored = wait_for_run(response.headers["X-Mortar-Run-Id"])
    first = Run.objects.get(pk=original)
    assert stored.rerun_of == original
    assert stored.prompt_tokens == first.prompt_tokens  # the image counted again
    assert images_of(stored.pk) == [image]  # the same image, stored once
