"""The Cost & cache audit page: grouped by organization unless the operator chooses, paged
(never one 5,196-px page grouped by every field), every row still in the CSV."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Organization
from dashboard.selectors.audit import PAGE_SIZE
from telemetry.models import UsageRollup

pytestmark = pytest.mark.django_db

HOUR = datetime(2025, 7, 8, 9, tzinfo=UTC)
USERS = PAGE_SIZE + 12
ROW = re.compile(r'<tr>\s*<td class="clip narrow" title="([^"]*)">')


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("audit-pages-staff", is_staff=True))
    return client


@pytest.fixture
def organizations() -> tuple[Organization, Organization]:
    acme = Organization.objects.create(name="pages-acme")
    other = Organization.objects.create(name="pages-other")
    # User i spent i cents, two models each: grouped by end user, one row per user.
    for i in range(1, USERS + 1):
        for model in ("m-1", "m-2"):
            UsageRollup.objects.create(
                hour=HOUR,
                organization=acme,
                end_user=f"user-{i:03d}",
                model=model,
                requests=1,
                prompt_tokens=10,
                cost=Decimal(i) / 200,
            )
    UsageRollup.objects.create(hour=HOUR, organization=other, requests=3, cost=Decimal("0.2"))
    return acme, other


def audit(client: Client, **params: object) -> str:
    response = client.get(
        "/dashboard/audit/", {"since": "2025-07-08", "until": "2025-07-08", **params}
    )
    assert response.status_code == 200
    return response.content.decode()


def body_rows(html: str) -> list[str]:
    return [cells for cells in re.findall(r"<tbody>(.*?)</tbody>", html, re.S)[0].split("<tr")][1:]


def test_it_groups_by_organization_by_default(staff: Client, organizations: tuple) -> None:
    html = audit(staff)
    rows = body_rows(html)
    assert len(rows) == 2
    assert "pages-acme" in rows[0] and f"{USERS * 2:,}" in rows[0]  # two rollups per user
    assert "pages-other" in rows[1]
    assert re.search(r'value="organization"[^>]* checked', html)
    assert not re.search(r'value="end_user"[^>]* checked', html)
    assert "End user</a>" not in html  # no column for a dimension not grouped by


def test_page_two_holds_the_rest_of_the_rows(staff: Client, organizations: tuple) -> None:
    acme, _ = organizations
    params = {"organization": acme.pk, "group": "end_user"}
    first = ROW.findall(audit(staff, **params))
    second_html = audit(staff, **params, page=2)
    second = ROW.findall(second_html)
    # The most expensive first, PAGE_SIZE on page 1, the rest on page 2, none twice.
    expected = [f"user-{i:03d}" for i in range(USERS, 0, -1)]
    assert first == expected[:PAGE_SIZE]
    assert second == expected[PAGE_SIZE:]
    assert f"Rows {PAGE_SIZE + 1}\N{EN DASH}{USERS} of {USERS}" in second_html
    assert 'rel="prev"' in second_html and 'rel="next"' not in second_html
    # A page past the last is the last; a page that is no number is the first, never a 500.
    assert ROW.findall(audit(staff, **params, page=9)) == second
    assert ROW.findall(audit(staff, **params, page="x")) == first
    # The totals are of every row, not the page's.
    assert f'<th class="num">{USERS * 2:,}</th>' in second_html

    exported = staff.get(
        "/dashboard/audit/",
        {"since": "2025-07-08", "until": "2025-07-08", **params, "page": 2, "format": "csv"},
    )
    rows = list(csv.DictReader(io.StringIO(exported.content.decode())))
    assert [row["end_user"] for row in rows] == expected  # the CSV has them all
    assert {row["organization"] for row in rows} == {""}  # not grouped by organization


def test_sorting_and_grouping_by_two_dimensions(staff: Client, organizations: tuple) -> None:
    acme, _ = organizations
    html = audit(staff, organization=acme.pk, group=["end_user", "model"], sort="end_user")
    first = body_rows(html)[:3]
    assert ["user-001" in r and "m-1" in r for r in first] == [True, False, False]
    assert "user-001" in first[1] and "m-2" in first[1]
    assert f"of {USERS * 2}" in html.replace(",", "")
