"""The dashboard's budgets page: spend against budget per organization and key, with a bar."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Organization
from accounts.services import key_create
from billing.budgets import TOTAL_PERIOD_START, period_start
from billing.models import BudgetSpend

pytestmark = pytest.mark.django_db


def row(html: str, budget: str) -> str:
    found = re.search(rf'<tr data-budget="{re.escape(budget)}">(.*?)</tr>', html, re.S)
    assert found is not None, budget
    return found.group(1)


def figure(cells: str, name: str) -> str:
    found = re.search(rf'data-figure="{name}">([^<]*)<', cells)
    assert found is not None, name
    return found.group(1)


def test_it_shows_spend_against_each_budget_with_a_bar(client: Client) -> None:
    client.force_login(User.objects.create_user("budget-staff", is_staff=True))
    organization = Organization.objects.create(
        name="budgeted", budget_usd=Decimal("20"), budget_period="month"
    )
    issued = key_create(organization=organization, name="agent")
    issued.key.budget_usd = Decimal("4")
    issued.key.budget_period = "total"
    issued.key.save()
    Organization.objects.create(name="unbudgeted")
    month = period_start("month", datetime.now(UTC))
    BudgetSpend.objects.create(
        owner="organization",
        owner_id=organization.id,
        period="month",
        period_start=month,
        spent_usd=Decimal("4.5"),
        held_usd=Decimal("0.5"),
    )
    BudgetSpend.objects.create(
        owner="key",
        owner_id=issued.key.id,
        period="total",
        period_start=TOTAL_PERIOD_START,
        spent_usd=Decimal("3.9"),
    )

    html = client.get("/dashboard/budgets/").content.decode()

    org_row = row(html, "organization:budgeted")
    assert (figure(org_row, "spent"), figure(org_row, "held"), figure(org_row, "remaining")) == (
        "$4.50",
        "$0.50",
        "$15.00",
    )
    assert 'value="25"' in org_row  # (4.5 + 0.5) / 20
    key_row = row(html, f"key:agent ({issued.key.prefix}…)")
    assert figure(key_row, "remaining") == "$0.10"
    assert 'value="97"' in key_row
    assert "never" in key_row  # a total budget never resets
    assert "unbudgeted" not in html
