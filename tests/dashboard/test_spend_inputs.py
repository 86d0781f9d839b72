"""The Spend page's input: staff only, and a filter it cannot read is said on the page (never a
500); every table's CSV has its header."""

from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth.models import User
from django.test import Client

from dashboard.forms import SPEND_TABLES

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("spend-inputs-staff", is_staff=True))
    return client


def test_it_is_for_staff_only() -> None:
    client = Client()
    assert client.get("/dashboard/spend/").status_code == 302
    client.force_login(User.objects.create_user("spend-visitor", is_staff=False))
    response = client.get("/dashboard/spend/", {"table": "end_user", "format": "csv"})
    assert response.status_code == 302
    assert response["Location"].startswith("/dashboard/login/")


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"organization": "abc"}, "organization"),
        ({"organization": "999999"}, "organization"),
        ({"range": "5y"}, "range"),
        ({"table": "secrets", "format": "csv"}, "table"),
    ],
)
def test_a_filter_it_cannot_read_is_named_on_the_page(
    staff: Client, params: dict[str, str], named: str
) -> None:
    response = staff.get("/dashboard/spend/", params)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert 'id="form-errors"' in html
    assert f"{named}: " in html


@pytest.mark.parametrize("table", SPEND_TABLES)
def test_each_table_downloads_as_csv_with_its_header(staff: Client, table: str) -> None:
    response = staff.get("/dashboard/spend/", {"range": "24h", "table": table, "format": "csv"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert f"mortar-spend-{table}-" in response["Content-Disposition"]
    header = next(csv.reader(io.StringIO(response.content.decode())))
    expected = {
        "errors": ["error_code", "errors"],
        "latency": ["bin", "upper_ms", "runs"],
        "ttft": ["bin", "upper_ms", "runs"],
    }.get(
        table,
        [
            table,
            "requests",
            "errors",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "cache_hit_ratio",
            "cost",
            "cache_savings",
        ],
    )
    assert header == expected
