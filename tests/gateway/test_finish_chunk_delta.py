"""The organization's opt-in `"delta": {}` on the finish chunk, seen through the OpenAI SDK.

The contract's finish chunk has no `delta`; the SDK then gives `choices[0].delta` as None, and
the loop of OpenAI's own docs (`chunk.choices[0].delta.content`) raises on it. An organization
with `finish_chunk_delta` gets `"delta": {}` there instead, stored and replayed as sent.
"""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from accounts.models import Organization
from accounts.services import key_create
from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

MODEL = "Qwen/Qwen2.5-7B-Instruct"
QUESTION = [{"role": "user", "content": "What does max_tokens limit?"}]
SPEC_REPLY = "It caps how many tokens the model may generate for this reply."
ID_LINE = re.compile(rb"^id: \d+\n", re.MULTILINE)


@pytest.fixture(scope="module")
def opted_in(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> Tenant:
    """An organization with the setting on, committed for the server process."""
    with django_db_blocker.unblock():
        organization, _ = Organization.objects.update_or_create(
            name="finish-delta-co", defaults={"finish_chunk_delta": True}
        )
        issued = key_create(organization=organization, name="tests")
    return Tenant(organization=organization, key=issued.key, secret=issued.secret)


def docs_loop(server: ServerProcess, secret: str) -> tuple[str, list[str]]:
    """OpenAI's documented streaming loop, verbatim in its use of `delta`."""
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=secret)
    stream = client.chat.completions.create(model=MODEL, messages=QUESTION, stream=True)
    run_id, pieces = "", []
    for chunk in stream:
        run_id = chunk.id
        if chunk.choices[0].delta.content is not None:
            pieces.append(chunk.choices[0].delta.content)
    return run_id, pieces


def stream_helper(server: ServerProcess, secret: str) -> str:
    """The SDK's own streaming helper, which accumulates every chunk's `delta`."""
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=secret)
    with client.chat.completions.stream(model=MODEL, messages=QUESTION) as stream:
        for _ in stream:
            pass
        return stream.get_final_completion().choices[0].message.content or ""


def received_bytes(server: ServerProcess, secret: str) -> tuple[str, bytes]:
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": QUESTION, "stream": True},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    ) as response:
        return response.headers["X-Mortar-Run-Id"], b"".join(response.iter_raw())


def finish_event(stream: bytes) -> bytes:
    [event] = [event for event in stream.split(b"\n\n") if b'"finish_reason":"stop"' in event]
    return event


def test_the_docs_loop_raises_on_the_contract_s_finish_chunk(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    assert tenant.organization.finish_chunk_delta is False  # the default
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'content'"):
        docs_loop(mortar_server, tenant.secret)

    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'to_dict'"):
        stream_helper(mortar_server, tenant.secret)

    run_id, stream = received_bytes(mortar_server, tenant.secret)
    assert b'"delta"' not in finish_event(stream)
    assert b'"delta"' not in finish_event(stored_bytes(wait_for_run(run_id)))


def test_the_docs_loop_reads_the_whole_reply_with_the_setting(
    mortar_server: ServerProcess, opted_in: Tenant
) -> None:
    run_id, pieces = docs_loop(mortar_server, opted_in.secret)

    assert "".join(pieces) == SPEC_REPLY
    assert stream_helper(mortar_server, opted_in.secret) == SPEC_REPLY
    run = wait_for_run(run_id)
    assert run.finish_reason == "stop"
    assert b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]' in (
        finish_event(stored_bytes(run))
    )


def test_the_finish_chunk_with_delta_is_stored_and_replayed_as_sent(
    mortar_server: ServerProcess, opted_in: Tenant
) -> None:
    run_id, stream = received_bytes(mortar_server, opted_in.secret)
    run = wait_for_run(run_id)

    assert b'"delta":{}' in finish_event(stream)
    assert stored_bytes(run) == stream
    replay = httpx.get(
        f"{mortar_server.base_url}/v1/chat/completions/runs/{run_id}",
        headers={"Authorization": f"Bearer {opted_in.secret}"},
        timeout=30,
    )
    assert replay.status_code == 200
    assert ID_LINE.sub(b"", replay.content) == stream


def test_a_json_reply_is_the_same_with_or_without_the_setting(
    mortar_server: ServerProcess, tenant: Tenant, opted_in: Tenant
) -> None:
    replies = [
        openai.OpenAI(base_url=f"{mortar_server.base_url}/v1", api_key=secret)
        .chat.completions.create(model=MODEL, messages=QUESTION)
        .choices[0]
        .message.content
        for secret in (tenant.secret, opted_in.secret)
    ]
    assert replies == [SPEC_REPLY, SPEC_REPLY]


def test_staff_turn_it_on_in_the_admin(client) -> None:  # type: ignore[no-untyped-def]
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("delta-admin", password="x" * 20))
    organization = Organization.objects.create(name="admin-delta-co")
    page = client.get(f"/admin/accounts/organization/{organization.pk}/change/")
    assert page.status_code == 200
    assert b'name="finish_chunk_delta"' in page.content

    form = page.context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None}
    data.update({"name": organization.name, "finish_chunk_delta": "on", "_save": "Save"})
    saved = client.post(f"/admin/accounts/organization/{organization.pk}/change/", data)
    assert saved.status_code == 302, saved.content
    organization.refresh_from_db()
    assert organization.finish_chunk_delta is True


def test_createorg_turns_it_on_when_asked() -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("createorg", "strict-at-birth", "--finish-chunk-delta", stdout=out)
    call_command("createorg", "default-at-birth", stdout=StringIO())

    assert "(finish_chunk_delta on)" in out.getvalue()
    assert Organization.objects.get(name="strict-at-birth").finish_chunk_delta is True
    assert Organization.objects.get(name="default-at-birth").finish_chunk_delta is False
