"""Re-run, compare and the playground, driven in headless Chromium against a real server and the
mock model server: an operator sends a stored run again to another model with an edited
request and reads the diff; sends it as it was and sees the same reply; sends a prompt from the
playground and watches it stream in, stored as a run of the chosen key's organization."""

from __future__ import annotations

import re
import uuid

import httpx
import orjson
import pytest

from accounts.models import Organization
from accounts.services import key_create
from dashboard.selectors.replies import reply_of
from telemetry.models import Run, RunChunk
from tests.conftest import Tenant, wait_for_run
from tests.dashboard.conftest import STAFF, sign_in
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair, mock_requests, mock_reset

pytestmark = pytest.mark.django_db

QUESTION = "Which replica served the last request in this conversation?"


def sent(server: ServerProcess, secret: str, **fields: object) -> str:
    body = {"messages": [{"role": "user", "content": QUESTION}], "stream": False, **fields}
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    run_id = response.headers["X-Mortar-Run-Id"]
    wait_for_run(run_id)
    return run_id


def stored_reply(run_id: str) -> str:
    chunks = RunChunk.objects.filter(run_id=run_id).order_by("seq").values_list("data", flat=True)
    return reply_of([bytes(data) for data in chunks]).content


@pytest.fixture
def page(browser, mortar_server: ServerProcess, dashboard_users):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    sign_in(page, mortar_server.base_url, dashboard_users["staff"])
    page.wait_for_url("**/dashboard/")
    yield page
    context.close()


def test_operator_reruns_a_run_edited_to_another_model_and_reads_the_diff(
    page, mortar_server: ServerProcess, tenant: Tenant, upstream_models: MockPair
) -> None:
    original = sent(mortar_server, tenant.secret)  # the scripted default model
    mock_reset(upstream_models.a)
    base = mortar_server.base_url

    page.goto(f"{base}/dashboard/runs/{original}/")
    page.click("#rerun")
    page.wait_for_url(f"**/dashboard/runs/{original}/rerun")
    assert page.locator("select[name=key]").input_value() == str(tenant.key.pk)
    request = orjson.loads(page.locator("textarea[name=request]").input_value())
    assert request["messages"][0]["content"] == QUESTION
    page.select_option("select[name=model]", "mock-one")
    edited = {**request, "temperature": 0.25, "max_tokens": 40}
    page.fill("textarea[name=request]", orjson.dumps(edited).decode())
    page.click("#rerun-send")
    page.wait_for_url(f"**/dashboard/runs/{original}/compare/**")

    new_id = page.url.rstrip("/").rsplit("/", 1)[1]
    rerun = Run.objects.get(pk=new_id)
    assert (rerun.rerun_of, rerun.model, rerun.api_key_id) == (original, "mock-one", tenant.key.pk)
    assert rerun.status == Run.Status.COMPLETED
    assert rerun.end_user == f"dashboard:{STAFF}"
    (upstream,) = [entry["body"] for entry in mock_requests(upstream_models.a)]
    assert upstream["temperature"] == 0.25 and upstream["max_tokens"] == 40
    # Side by side, each reply as stored, and the diff of the two texts.
    assert page.locator("#reply-left").inner_text() == stored_reply(original)
    assert page.locator("#reply-right").inner_text() == stored_reply(new_id)
    assert stored_reply(original) != stored_reply(new_id)
    assert page.locator("#reply-diff del").count() >= 1
    assert page.locator("#reply-diff ins").count() >= 1
    assert page.locator("tr[data-fact=model].differs").count() == 1
    assert "mock-one" in page.locator("tr[data-fact=model]").inner_text()
    for fact in ("finish_reason", "prompt_tokens", "completion_tokens", "cost", "ttft", "duration"):
        assert page.locator(f"tr[data-fact={fact}]").count() == 1
    assert "0.25" in page.locator("#request-diff ins").all_inner_texts()[0]
    # The new run's page names its origin and links back to the comparison.
    page.goto(f"{base}/dashboard/runs/{new_id}/")
    assert original in page.locator("main").inner_text()
    page.click("#compare")
    page.wait_for_url(f"**/dashboard/runs/{original}/compare/{new_id}/")


def test_a_run_sent_again_as_it_was_compares_as_the_same_reply(
    page, mortar_server: ServerProcess, tenant: Tenant
) -> None:
    original = sent(mortar_server, tenant.secret)

    page.goto(f"{mortar_server.base_url}/dashboard/runs/{original}/rerun")
    page.click("#rerun-send")
    page.wait_for_url(f"**/dashboard/runs/{original}/compare/**")

    new_id = page.url.rstrip("/").rsplit("/", 1)[1]
    assert Run.objects.get(pk=new_id).rerun_of == original
    assert page.locator("#reply-same").count() == 1
    assert page.locator("#reply-diff del, #reply-diff ins").count() == 0
    assert page.locator("tr[data-fact=model].differs").count() == 0


def test_a_rerun_refuses_a_key_of_another_organization(
    page, mortar_server: ServerProcess, tenant: Tenant, other_tenant: Tenant
) -> None:
    original = sent(mortar_server, tenant.secret)
    url = f"{mortar_server.base_url}/dashboard/runs/{original}/rerun"
    page.goto(url)
    token = page.locator("[name=csrfmiddlewaretoken]").first.input_value()
    assert page.locator(f"select[name=key] option[value='{other_tenant.key.pk}']").count() == 0

    response = page.request.post(
        url,
        form={
            "csrfmiddlewaretoken": token,
            "key": str(other_tenant.key.pk),
            "model": "",
            "request": orjson.dumps({"messages": [{"role": "user", "content": "hi"}]}).decode(),
        },
        headers={"Referer": url},
    )

    assert response.status == 400
    assert "Select a valid choice" in response.text()
    assert not Run.objects.filter(rerun_of=original).exists()


@pytest.fixture(scope="module")
def metadata_secret(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> str:
    """The key of an organization that keeps metadata only, committed for the server."""
    with django_db_blocker.unblock():
        organization = Organization.objects.create(
            name=f"metadata-{uuid.uuid4().hex[:8]}", retention=Organization.Retention.METADATA
        )
        return key_create(organization=organization, name="tests").secret


def test_a_run_whose_request_was_not_kept_offers_no_rerun(
    page, mortar_server: ServerProcess, metadata_secret: str
) -> None:
    original = sent(mortar_server, metadata_secret)

    page.goto(f"{mortar_server.base_url}/dashboard/runs/{original}/")
    assert page.locator("#rerun").count() == 0
    page.goto(f"{mortar_server.base_url}/dashboard/runs/{original}/rerun")
    assert "retention: metadata" in page.locator("#rerun-unavailable").inner_text()
    assert page.locator("#rerun-form").count() == 0


def test_operator_sends_a_prompt_from_the_playground_and_watches_it_stream(
    page, mortar_server: ServerProcess, tenant: Tenant, slow_model: str
) -> None:
    page.goto(f"{mortar_server.base_url}/dashboard/playground/")
    page.select_option("select[name=key]", str(tenant.key.pk))
    page.select_option("select[name=model]", slow_model)
    page.fill("textarea[name=prompt]", "Draft a reply to the customer about the delayed invoice")
    page.fill("input[name=max_tokens]", "30")
    page.click("#playground-send")

    # Streamed: part of the reply is on the page while the stream is still open.
    page.wait_for_function(
        "() => document.getElementById('playground-state').textContent === 'streaming…'"
        " && document.getElementById('playground-reply').textContent.length > 0"
    )
    page.wait_for_selector("#playground-state[data-state=done]", timeout=30_000)
    shown = page.locator("#playground-reply").inner_text()
    run_id = page.locator("#playground-run-link").inner_text()
    run = wait_for_run(run_id)
    assert (run.model, run.api_key_id, run.organization_id) == (
        slow_model,
        tenant.key.pk,
        tenant.organization.id,
    )
    assert (run.stream, run.status, run.end_user) == (
        True,
        Run.Status.COMPLETED,
        f"dashboard:{STAFF}",
    )
    assert run.rerun_of is None
    assert shown == stored_reply(run_id) and shown
    assert re.search(r"finish reason: \w+", page.locator("#playground-outcome").inner_text())
    page.click("#playground-run-link")
    page.wait_for_url(f"**/dashboard/runs/{run_id}/")


def test_the_playground_answers_form_errors_without_sending(
    page, mortar_server: ServerProcess, tenant: Tenant
) -> None:
    url = f"{mortar_server.base_url}/dashboard/playground/"
    page.goto(url)
    token = page.locator("[name=csrfmiddlewaretoken]").first.input_value()
    before = Run.objects.filter(api_key=tenant.key).count()

    response = page.request.post(
        f"{mortar_server.base_url}/dashboard/playground/send",
        form={"csrfmiddlewaretoken": token, "key": str(tenant.key.pk), "model": "no-such-model"},
        headers={"Referer": url},
    )

    assert response.status == 400
    errors = response.json()["errors"]
    assert set(errors) == {"model", "prompt"}
    assert Run.objects.filter(api_key=tenant.key).count() == before


WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    for name in ("get_weather", "get_time")
]


def test_the_compare_page_diffs_the_tool_calls_of_a_rerun_sent_through_the_api(
    page, mortar_server: ServerProcess, tenant: Tenant
) -> None:
    original = sent(mortar_server, tenant.secret, tools=WEATHER_TOOLS)
    response = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions/runs/{original}/rerun",
        content=orjson.dumps(
            {"tool_choice": {"type": "function", "function": {"name": "get_time"}}}
        ),
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    new_id = response.headers["X-Mortar-Run-Id"]
    wait_for_run(new_id)

    page.goto(f"{mortar_server.base_url}/dashboard/runs/{original}/compare/{new_id}/")

    removed = " ".join(page.locator("#tool-calls-diff del").all_inner_texts())
    added = " ".join(page.locator("#tool-calls-diff ins").all_inner_texts())
    assert "get_weather" in removed and "get_time" not in removed
    assert "get_time" in added and "get_weather" not in added
    finish = page.locator("tr[data-fact=finish_reason]")
    assert finish.inner_text().split() == ["Finish", "reason", "tool_calls", "tool_calls"]
    assert finish.get_attribute("class") == ""
    assert "tool_choice" in " ".join(page.locator("#request-diff ins").all_inner_texts())
