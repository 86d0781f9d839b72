"""The Overview counts the requests just served, on whatever backends the suite runs: on the
embedded default (no Celery beat, rollups refreshed in-process) as on Postgres and Redis with
no beat running. It once read "Requests 0" after ~40 requests on `make serve`."""

from __future__ import annotations

import re
from decimal import Decimal

import httpx
import openai
import pytest
from django.db.models import Sum

from accounts.models import Organization
from dashboard.templatetags.dashboard import money
from telemetry.models import Run
from tests.conftest import CliTenant, wait_for_run
from tests.dashboard.conftest import DASHBOARD_PASSWORD
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

REQUESTS = 12
CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
FIGURE = re.compile(r'data-figure="(\w+)"[^>]*>([^<]*)<')


def signed_in(server: ServerProcess, username: str) -> httpx.Client:
    client = httpx.Client(base_url=server.base_url, timeout=30)
    token = CSRF_FIELD.search(client.get("/dashboard/login/").text)
    assert token is not None
    answer = client.post(
        "/dashboard/login/",
        data={
            "csrfmiddlewaretoken": token.group(1),
            "username": username,
            "password": DASHBOARD_PASSWORD,
        },
    )
    assert answer.status_code == 302, answer.text
    return client


def figures(page: str) -> dict[str, str]:
    return {name: value.strip() for name, value in FIGURE.findall(page)}


def test_the_overview_counts_the_requests_just_served(
    mortar_server: ServerProcess,
    new_tenant: CliTenant,
    priced_model: str,
    dashboard_users: dict[str, str],
) -> None:
    """A fresh organization (made with the CLI, committed), so the page shows its runs only."""
    organization = Organization.objects.get(name=new_tenant.name)
    client = openai.OpenAI(base_url=f"{mortar_server.base_url}/v1", api_key=new_tenant.secret)
    ids = []
    for i in range(REQUESTS):
        messages = [{"role": "user", "content": f"Question number {i}: what does max_tokens do?"}]
        if i % 2:
            ids.append(client.chat.completions.create(model=priced_model, messages=messages).id)
        else:
            stream = client.chat.completions.create(
                model=priced_model, messages=messages, stream=True
            )
            ids.append(next(iter(stream)).id)
            for _ in stream:
                pass
    with pytest.raises(openai.BadRequestError) as refused:  # a run too, and an error
        client.chat.completions.create(
            model=priced_model,
            messages=[{"role": "user", "content": "hi"}],
            temperature=9,
        )
    ids.append(refused.value.response.headers["X-Mortar-Run-Id"])
    for run_id in ids:
        wait_for_run(run_id)
    runs = Run.objects.filter(organization=organization)
    assert runs.count() == REQUESTS + 1
    stored = runs.aggregate(
        prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"), cost=Sum("cost")
    )

    dashboard = signed_in(mortar_server, dashboard_users["staff"])
    page = dashboard.get("/dashboard/", params={"organization": organization.pk, "range": "1h"})
    assert page.status_code == 200
    shown = figures(page.text)

    assert shown["requests"] == str(REQUESTS + 1)
    assert shown["errors"] == "1"
    assert shown["prompt_tokens"] == f"{stored['prompt']:,}"
    assert shown["completion_tokens"] == f"{stored['completion']:,}"
    assert stored["cost"] > Decimal(0)
    assert shown["cost"] == money(stored["cost"])
