"""Requests refused by spend control (402 over budget, 429 over a rate limit) are runs the
dashboard's error view lists: status `refused`, with their HTTP status's code."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import ApiKey
from tests.billing.test_rate_limits import ask, limited_tenant
from tests.conftest import wait_for_run
from tests.support.budgets import budget_tenant, complete
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db


def refused_rows(client: Client, key_id: int) -> dict[str, str]:
    """The runs list filtered to refused runs of one key: run id → its status cell."""
    html = client.get("/dashboard/runs/", {"status": "refused", "key": key_id}).content.decode()
    rows = re.findall(r'<tr data-run-id="([^"]+)">(.*?)</tr>', html, re.S)
    return {
        run_id: re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cells)).strip()
        for run_id, cells in rows
    }


def test_402_and_429_refusals_are_in_the_dashboard_s_error_view(
    client: Client, mortar_server: ServerProcess, budget_model: str
) -> None:
    client.force_login(User.objects.create_user("refusals-staff", is_staff=True))
    broke = budget_tenant(key_usd="0.000001")
    over_budget = complete(mortar_server, broke.secret, budget_model, max_tokens=13)
    limited = limited_tenant("--rpm", "1")
    assert ask(mortar_server, limited.secret).status_code == 200
    over_limit = ask(mortar_server, limited.secret)
    assert (over_budget.status_code, over_limit.status_code) == (402, 429)
    for response in (over_budget, over_limit):
        wait_for_run(response.headers["X-Mortar-Run-Id"])

    budget_rows = refused_rows(client, broke.key_id)
    assert list(budget_rows) == [over_budget.headers["X-Mortar-Run-Id"]]
    assert "insufficient_quota" in next(iter(budget_rows.values()))
    limited_key = ApiKey.objects.get(organization__name=limited.name)
    limit_rows = refused_rows(client, limited_key.id)
    assert list(limit_rows) == [over_limit.headers["X-Mortar-Run-Id"]]  # not the admitted one
    assert "rate_limit_exceeded" in next(iter(limit_rows.values()))
