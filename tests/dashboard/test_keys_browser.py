"""The Keys page driven in headless Chromium against a real server: create a key (its secret
shown once, copied, and working with the OpenAI SDK), reload without seeing it again, rename it,
revoke it (its next request gets 401), and read who did each in the audit table."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest
from playwright.sync_api import expect

from accounts.auth import key_digest
from accounts.models import ApiKey, KeyChange, Organization
from tests.conftest import wait_for_run
from tests.dashboard.conftest import STAFF, sign_in
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def spare_organizations(
    django_db_setup: None, django_db_blocker, sees_other_connections: None
) -> Iterator[list[Organization]]:
    """Organizations without keys, committed for the server (a test's own rows are not: they
    live in its rolled-back transaction)."""
    tag = uuid.uuid4().hex[:8]
    with django_db_blocker.unblock():
        made = [Organization.objects.create(name=f"keys-browser-{tag}-{n}") for n in range(8)]
    yield list(made)
    # Their keys, revoked ones included, and runs would stay in the session's database for
    # the modules after this one (some count every key).
    with django_db_blocker.unblock():
        Organization.objects.filter(pk__in=[o.pk for o in made]).delete()


@pytest.fixture
def fresh_organization(spare_organizations: list[Organization]) -> Organization:
    """One of the spare organizations, for this test alone."""
    return spare_organizations.pop()


@pytest.fixture
def keys_page(
    browser, mortar_server: ServerProcess, dashboard_users, fresh_organization: Organization
) -> Iterator[object]:
    """The Keys page, signed in as staff, loaded after `fresh_organization` exists."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    sign_in(page, mortar_server.base_url, dashboard_users["staff"], next_path="/dashboard/keys/")
    page.wait_for_url("**/dashboard/keys/")
    yield page
    context.close()


def chat(server: ServerProcess, secret: str) -> str:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=secret, max_retries=0)
    reply = client.chat.completions.create(
        model="Qwen/Qwen2.5-7B-Instruct",
        messages=[{"role": "user", "content": "What does max_tokens limit?"}],
    )
    assert reply.choices[0].message.content
    return reply.id


def status_of(server: ServerProcess, secret: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "stream": False},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def test_staff_create_use_rename_and_revoke_a_key(
    keys_page, mortar_server: ServerProcess, fresh_organization: Organization
) -> None:
    page = keys_page
    name = f"ci-{uuid.uuid4().hex[:6]}"
    page.select_option("#key-create select[name=organization]", str(fresh_organization.pk))
    page.fill("#key-create input[name=name]", name)
    page.fill("#key-create input[name=requests_per_minute]", "600")
    page.click("#key-create button[type=submit]")

    secret = page.locator("#new-secret").input_value()
    assert secret.startswith("mk-") and len(secret) == 51
    key = ApiKey.objects.get(organization=fresh_organization)
    assert (key.name, key.digest, key.requests_per_minute) == (name, key_digest(secret), 600)
    page.click("#copy-secret")
    expect(page.locator("#copy-state")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == secret

    # The key works against the API, with the official SDK.
    run_id = chat(mortar_server, secret)
    assert wait_for_run(run_id).api_key_id == key.pk

    # A reload asks for the list again: no secret, no second key.
    page.reload()
    expect(page.locator("#keys")).to_be_visible()
    expect(page.locator("#new-secret")).to_have_count(0)
    assert secret not in page.content()
    assert ApiKey.objects.filter(organization=fresh_organization).count() == 1
    row = page.locator(f'#keys tr[data-key-id="{key.pk}"]')
    expect(row.locator('[data-figure="last-used"]')).not_to_have_text("never")
    expect(row).to_contain_text(fresh_organization.name)
    expect(row).to_contain_text(key.prefix)

    # Rename.
    row.locator("details.rename summary").click()
    row.locator("details.rename input[name=name]").fill(name + "-renamed")
    row.locator("details.rename button[type=submit]").click()
    page.wait_for_url("**/dashboard/keys/")
    expect(row.locator(".name")).to_have_text(name + "-renamed")
    key.refresh_from_db()
    assert key.name == name + "-renamed"

    # Revoke, confirming the dialog: the very next request with the key is refused.
    assert status_of(mortar_server, secret).status_code == 200  # cached on the worker, if shared
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("form.revoke button").click()
    page.wait_for_url("**/dashboard/keys/")
    expect(row.locator(".status")).to_have_text("revoked")
    refused = status_of(mortar_server, secret)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_key"

    # The audit: who, what, in order.
    changes = page.locator(f'#key-changes tr[data-key-id="{key.pk}"]')
    expect(changes).to_have_count(3)
    assert changes.evaluate_all("rows => rows.map(r => r.dataset.action)") == [
        "revoked",
        "renamed",
        "created",
    ]
    expect(changes.first).to_contain_text(STAFF)
    assert (
        list(KeyChange.objects.filter(key=key).values_list("actor_name", flat=True)) == [STAFF] * 3
    )


def test_dismissing_the_revoke_dialog_keeps_the_key(
    keys_page, mortar_server: ServerProcess, fresh_organization: Organization
) -> None:
    page = keys_page
    page.select_option("#key-create select[name=organization]", str(fresh_organization.pk))
    page.fill("#key-create input[name=name]", "kept")
    page.click("#key-create button[type=submit]")
    secret = page.locator("#new-secret").input_value()
    key = ApiKey.objects.get(organization=fresh_organization)
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.locator(f'#keys tr[data-key-id="{key.pk}"] form.revoke button').click()
    page.wait_for_timeout(300)
    key.refresh_from_db()
    assert key.revoked_at is None
    assert status_of(mortar_server, secret).status_code == 200


def test_a_bad_budget_is_a_form_error_in_the_page(
    keys_page, fresh_organization: Organization
) -> None:
    page = keys_page
    page.select_option("#key-create select[name=organization]", str(fresh_organization.pk))
    page.fill("#key-create input[name=budget_usd]", "-5")
    # The browser's own check (min on the number input) would stop the form: lift it, so the
    # server's answer is what is tested.
    page.evaluate("document.querySelector('#key-create').noValidate = true")
    page.click("#key-create button[type=submit]")
    expect(page.locator("#key-create-errors")).to_contain_text("Budget (USD)")
    expect(page.locator("#new-secret")).to_have_count(0)
    assert not ApiKey.objects.filter(organization=fresh_organization).exists()


@pytest.mark.redis
def test_a_revocation_reaches_every_worker(
    keys_page,
    mortar_server: ServerProcess,
    second_server: ServerProcess,
    fresh_organization: Organization,
) -> None:
    page = keys_page
    page.select_option("#key-create select[name=organization]", str(fresh_organization.pk))
    page.click("#key-create button[type=submit]")
    secret = page.locator("#new-secret").input_value()
    key = ApiKey.objects.get(organization=fresh_organization)
    # Both workers look the key up, and cache it.
    for server in (mortar_server, second_server, mortar_server, second_server):
        assert status_of(server, secret).status_code == 200
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f'#keys tr[data-key-id="{key.pk}"] form.revoke button').click()
    page.wait_for_url("**/dashboard/keys/")
    for server in (second_server, mortar_server):
        assert status_of(server, secret).status_code == 401
