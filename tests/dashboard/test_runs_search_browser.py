"""The runs list in headless Chromium against a real server: the free-text search finds a run by
a word of its prompt and another by a word only its reply has, and each filter, chosen from its
select, narrows the list to the runs it names."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal

import httpx
import orjson
import pytest
from playwright.sync_api import expect

from accounts.models import Organization
from accounts.services import key_create
from gateway.models import CatalogModel, Deployment
from tests.conftest import wait_for_run
from tests.dashboard.conftest import sign_in
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Runs:
    """One organization's runs, each different from the others in one way."""

    organization_id: int
    tag: str
    key_two: int
    priced_model: str
    slow_deployment: str
    ids: dict[str, str]


def send(base_url: str, secret: str, body: dict, *, end_user: str = "") -> str:
    headers = {"Authorization": f"Bearer {secret}"}
    if end_user:
        headers["X-Mortar-End-User-Id"] = end_user
    answer = httpx.post(
        f"{base_url}/v1/chat/completions",
        content=orjson.dumps({"stream": False, **body}),
        headers=headers,
        timeout=60,
    )
    return answer.headers["X-Mortar-Run-Id"]


@pytest.fixture(scope="module")
def runs(
    django_db_setup: None, django_db_blocker, sees_other_connections: None, mortar_server
) -> Runs:
    tag = uuid.uuid4().hex[:10]
    with django_db_blocker.unblock():
        fast, _ = Deployment.objects.get_or_create(name=f"search-fast-{tag}")
        slow, _ = Deployment.objects.get_or_create(
            name=f"search-slow-{tag}", defaults={"scripted_delay_ms": 150}
        )
        priced = CatalogModel.objects.create(
            id=f"search-priced-{tag}",
            deployment=fast,
            context_window=4096,
            price_input=Decimal("5000"),  # per million tokens: a prompt costs cents
        )
        unpriced = CatalogModel.objects.create(
            id=f"search-slow-{tag}", deployment=slow, context_window=4096
        )
        organization = Organization.objects.create(name=f"search-{tag}")
        one = key_create(organization=organization, name="one")
        two = key_create(organization=organization, name="two")
    base = mortar_server.base_url
    ids = {
        # The word zq<tag> only in its system prompt (the scripted model echoes the user's).
        "prompt": send(
            base,
            one.secret,
            {
                "model": priced.id,
                "messages": [
                    {"role": "system", "content": f"Codeword zq{tag} stays secret."},
                    {"role": "user", "content": "hello"},
                ],
            },
            end_user=f"ann-{tag}",
        ),
        # "caps" only in its reply: the scripted model's answer to the docs' example question,
        # streamed in pieces of three words (the relay hands the whole reply to the writer).
        "reply": send(
            base,
            two.secret,
            {
                "model": unpriced.id,
                "messages": [{"role": "user", "content": "What does max_tokens limit?"}],
                "stream": True,
            },
        ),
        "slow": send(
            base,
            one.secret,
            {
                "model": unpriced.id,
                "messages": [{"role": "user", "content": "count with me " * 10}],
            },
        ),
        "refused": send(
            base,
            two.secret,
            {
                "model": unpriced.id,
                "messages": [{"role": "user", "content": "hi"}],
                "temperature": 7,
            },
        ),
        "cut": send(
            base,
            one.secret,
            {
                "model": unpriced.id,
                "messages": [{"role": "user", "content": "hello there how are you"}],
                "max_tokens": 2,
            },
        ),
    }
    with django_db_blocker.unblock():
        for run_id in ids.values():
            wait_for_run(run_id)
    return Runs(organization.pk, tag, two.key.pk, priced.id, slow.name, ids)


def test_search_and_every_filter_narrow_the_runs_list(
    browser, mortar_server: ServerProcess, runs: Runs, dashboard_users
) -> None:
    page = browser.new_page()
    start = f"/dashboard/runs/?organization={runs.organization_id}"
    sign_in(page, mortar_server.base_url, dashboard_users["staff"], next_path=start)
    page.wait_for_url(f"**{start}")

    def listed() -> set[str]:
        return set(
            page.locator("#runs tbody tr[data-run-id]").evaluate_all(
                "rows => rows.map(r => r.dataset.runId)"
            )
        )

    assert listed() == set(runs.ids.values())

    def narrowed(name: str, value: str, *, search: bool = False) -> set[str]:
        page.goto(f"{mortar_server.base_url}{start}")
        if search:
            page.fill(f"input[name={name}]", value)
        else:
            page.select_option(f"select[name={name}]", value)
        page.click("#run-filters button[type=submit]")
        page.wait_for_url(f"**{name}=**")
        return listed()

    ids = runs.ids
    assert narrowed("q", f"zq{runs.tag}", search=True) == {ids["prompt"]}
    assert narrowed("q", "caps", search=True) == {ids["reply"]}
    expect(page.locator("input[name=q]")).to_have_value("caps")
    assert narrowed("q", "max_tokens caps", search=True) == {ids["reply"]}
    assert narrowed("q", "nowhere-to-be-found", search=True) == set()
    expect(page.locator("#runs tbody")).to_contain_text("No runs match.")

    assert narrowed("key", str(runs.key_two)) == {ids["reply"], ids["refused"]}
    assert narrowed("model", runs.priced_model) == {ids["prompt"]}
    # (the refused run was refused before its model was resolved: it has no deployment)
    assert narrowed("deployment", runs.slow_deployment) == {ids["reply"], ids["slow"], ids["cut"]}
    assert narrowed("status", "refused") == {ids["refused"]}
    assert narrowed("error_code", "invalid_parameter") == {ids["refused"]}
    assert narrowed("finish_reason", "length") == {ids["cut"]}
    assert narrowed("end_user", f"ann-{runs.tag}") == {ids["prompt"]}
    assert narrowed("cost", "0.01-up") == {ids["prompt"]}
    assert narrowed("latency", "1s-up") == {ids["slow"]}
    expect(page.locator("select[name=latency]")).to_have_value("1s-up")

    # A search without a word is refused with a message; the other filters still apply.
    page.goto(f"{mortar_server.base_url}{start}&status=refused&q=%21%21%21")
    expect(page.locator(".notice")).to_contain_text("at least one letter or digit")
    assert listed() == {ids["refused"]}
    page.close()
