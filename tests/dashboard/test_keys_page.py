"""The Keys page's actions through Django's test client: bad input gets a form error and changes
nothing, every action needs staff and its CSRF token, and every change is audited."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from accounts.auth import key_digest
from accounts.models import ApiKey, KeyChange, Organization
from accounts.services import key_create
from dashboard.selectors.keys import key_rows
from telemetry.models import Run, UsageRollup
from tests.support.runs import query_plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def organization() -> Organization:
    return Organization.objects.create(name="keys-page-org")


@pytest.fixture
def staff() -> User:
    return User.objects.create_user("keys-staff", is_staff=True)


@pytest.fixture
def staff_client(staff: User) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def secret_on(page: str) -> str:
    found = re.search(r'id="new-secret" type="text" readonly value="([^"]+)"', page)
    assert found, "no secret on the page"
    return found[1]


def test_creating_a_key_shows_its_secret_once_and_stores_only_its_digest(
    staff_client: Client, staff: User, organization: Organization
) -> None:
    response = staff_client.post(
        "/dashboard/keys/",
        {
            "organization": organization.pk,
            "name": "  ci runner  ",
            "budget_usd": "12.5",
            "budget_period": "day",
            "requests_per_minute": "60",
            "tokens_per_minute": "",
        },
    )
    assert response.status_code == 201
    assert response["Cache-Control"] == "no-store"
    secret = secret_on(response.content.decode())
    key = ApiKey.objects.get(organization=organization)
    assert (key.name, key.prefix, key.digest) == ("ci runner", secret[:11], key_digest(secret))
    assert (key.budget_usd, key.budget_period) == (Decimal("12.5"), "day")
    assert (key.requests_per_minute, key.tokens_per_minute) == (60, None)
    assert not ApiKey.objects.filter(digest=secret).exists()
    [change] = KeyChange.objects.filter(key=key)
    assert (change.action, change.actor, change.actor_name) == ("created", staff, "keys-staff")
    assert change.detail == "budget $12.5 per day, 60 requests/min"
    # The list afterwards names the key, never its secret.
    page = staff_client.get("/dashboard/keys/").content.decode()
    assert "ci runner" in page and key.prefix in page
    assert secret not in page


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("budget_usd", "-1", "Budget (USD)"),
        ("budget_usd", "0.0000001", "Budget (USD)"),
        ("budget_usd", "lots", "Budget (USD)"),
        ("budget_usd", "100000000", "Budget (USD)"),
        ("requests_per_minute", "2147483648", "Requests/min"),
        ("requests_per_minute", "0", "Requests/min"),
        ("tokens_per_minute", "9999999999999", "Tokens/min"),
        ("budget_period", "week", "Budget period"),
        ("name", "n" * 201, "Name"),
        ("organization", "999999", "Organization"),
    ],
)
def test_bad_input_is_a_form_error_and_creates_nothing(
    staff_client: Client, organization: Organization, field: str, value: str, message: str
) -> None:
    data = {"organization": organization.pk, "name": "k", "budget_period": "month", field: value}
    response = staff_client.post("/dashboard/keys/", data)
    assert response.status_code == 400
    errors = re.search(
        r'<ul class="errorlist notice" id="key-create-errors">(.*?)</ul>',
        response.content.decode(),
        re.S,
    )
    assert errors and message in errors[1]
    assert not ApiKey.objects.filter(organization=organization).exists()
    assert not KeyChange.objects.filter(key__organization=organization).exists()


def test_rename_and_revoke_are_audited_with_who_and_what(
    staff_client: Client, staff: User, organization: Organization
) -> None:
    key = key_create(organization=organization, name="old name").key
    response = staff_client.post(f"/dashboard/keys/{key.pk}/rename", {"name": "new name"})
    assert response.status_code == 302 and response["Location"] == "/dashboard/keys/"
    response = staff_client.post(f"/dashboard/keys/{key.pk}/revoke")
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.name == "new name" and key.revoked_at is not None
    changes = list(KeyChange.objects.filter(key=key).order_by("at", "id"))
    assert [(c.action, c.actor_name, c.detail) for c in changes] == [
        ("renamed", "keys-staff", "old name → new name"),
        ("revoked", "keys-staff", ""),
    ]
    page = staff_client.get("/dashboard/keys/").content.decode()
    for action in ("renamed", "revoked"):
        assert page.count(f'data-action="{action}" data-key-id="{key.pk}"') == 1


def test_revoking_twice_is_a_conflict_and_changes_nothing(
    staff_client: Client, organization: Organization
) -> None:
    key = key_create(organization=organization, name="k").key
    staff_client.post(f"/dashboard/keys/{key.pk}/revoke")
    key.refresh_from_db()
    revoked_at = key.revoked_at
    response = staff_client.post(f"/dashboard/keys/{key.pk}/revoke")
    assert response.status_code == 409
    assert "already revoked" in response.content.decode()
    key.refresh_from_db()
    assert key.revoked_at == revoked_at
    assert KeyChange.objects.filter(key=key).count() == 1


def test_a_name_too_long_is_refused_and_unknown_keys_are_404(
    staff_client: Client, organization: Organization
) -> None:
    key = key_create(organization=organization, name="keep").key
    response = staff_client.post(f"/dashboard/keys/{key.pk}/rename", {"name": "x" * 201})
    assert response.status_code == 400
    assert "The key was not renamed" in response.content.decode()
    key.refresh_from_db()
    assert key.name == "keep"
    assert staff_client.post("/dashboard/keys/999999/rename", {"name": "a"}).status_code == 404
    assert staff_client.post("/dashboard/keys/999999/revoke").status_code == 404
    assert staff_client.get(f"/dashboard/keys/{key.pk}/revoke").status_code == 405
    assert not KeyChange.objects.filter(key__organization=organization).exists()


@pytest.mark.parametrize("action", ["rename", "revoke", "create"])
def test_every_action_needs_the_csrf_token(organization: Organization, action: str) -> None:
    key = key_create(organization=organization, name="guarded").key
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user("keys-csrf", is_staff=True))
    path = "/dashboard/keys/" if action == "create" else f"/dashboard/keys/{key.pk}/{action}"
    response = client.post(path, {"organization": organization.pk, "name": "x"})
    assert response.status_code == 403
    key.refresh_from_db()
    assert key.name == "guarded" and key.revoked_at is None
    assert (
        ApiKey.objects.filter(organization=organization).count() == 1
        and not KeyChange.objects.filter(key=key).exists()
    )


@pytest.mark.parametrize("who", ["anonymous", "visitor"])
def test_only_staff_may_act(client: Client, organization: Organization, who: str) -> None:
    key = key_create(organization=organization, name="guarded").key
    if who == "visitor":
        client.force_login(User.objects.create_user("keys-visitor", is_staff=False))
    for path in (f"/dashboard/keys/{key.pk}/revoke", f"/dashboard/keys/{key.pk}/rename"):
        response = client.post(path, {"name": "taken"})
        assert response.status_code == 302 and "/dashboard/login/" in response["Location"]
    response = client.post("/dashboard/keys/", {"organization": organization.pk})
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.name == "guarded" and key.revoked_at is None
    assert ApiKey.objects.filter(organization=organization).count() == 1


def test_last_used_and_spend_come_from_runs_and_rollups(organization: Organization) -> None:
    used = key_create(organization=organization, name="used").key
    idle = key_create(organization=organization, name="idle").key
    now = datetime(2030, 5, 15, 12, 30, tzinfo=UTC)
    latest = now - timedelta(minutes=3)
    for n, (accepted, cost) in enumerate(
        [(now - timedelta(minutes=30), "0.25"), (latest, "0.5"), (now - timedelta(days=40), "9")]
    ):
        Run.objects.create(
            id=f"chatcmpl-{n:024x}",
            organization=organization,
            api_key=used,
            status=Run.Status.COMPLETED,
            accepted_at=accepted,
            cost=Decimal(cost),
        )
    # Older hours are read from their rollups (the run of 40 days ago has none, so it is not
    # counted: runs are summed only from the hour before the current one, as on the Overview).
    for hour, cost in (
        (datetime(2030, 5, 2, 10, tzinfo=UTC), "1.5"),
        (datetime(2030, 3, 1, tzinfo=UTC), "4"),
    ):
        UsageRollup.objects.create(
            hour=hour, organization=organization, api_key_id=used.pk, requests=1, cost=Decimal(cost)
        )
    rows = {row.key.pk: row for row in key_rows(now=now)}
    assert rows[used.pk].last_used == latest
    assert rows[idle.pk].last_used is None
    assert (rows[used.pk].period, rows[used.pk].period_label) == ("month", "this month")
    assert rows[used.pk].spent_period == Decimal("2.25")  # May: 0.25 + 0.5 + 1.5
    assert rows[used.pk].spent_total == Decimal("6.25")
    assert (rows[idle.pk].spent_period, rows[idle.pk].spent_total) == (Decimal(0), Decimal(0))


def test_the_admin_s_changes_to_a_key_are_audited_too(organization: Organization) -> None:
    key = key_create(organization=organization, name="admin-edited").key
    client = Client()
    admin = User.objects.create_superuser("keys-admin", password="x" * 12)
    client.force_login(admin)
    response = client.post(
        f"/admin/accounts/apikey/{key.pk}/change/",
        {
            "name": "admin-edited",
            "budget_usd": "5",
            "budget_period": "month",
            "requests_per_minute": "",
            "tokens_per_minute": "",
            "revoked_at_0": "",
            "revoked_at_1": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    [change] = KeyChange.objects.filter(key=key)
    assert (change.action, change.actor, change.detail) == (
        "changed",
        admin,
        "in the admin: budget_usd",
    )


def test_active_keys_are_listed_before_revoked_ones(
    staff_client: Client, organization: Organization
) -> None:
    first = key_create(organization=organization, name="first").key
    key_create(organization=organization, name="second")
    staff_client.post(f"/dashboard/keys/{first.pk}/revoke")
    page = staff_client.get("/dashboard/keys/").content.decode()
    ids = [int(found) for found in re.findall(r'<tr data-key-id="(\d+)"', page)]
    second = ApiKey.objects.get(organization=organization, name="second")
    assert ids.index(second.pk) < ids.index(first.pk)
    # Every revoked key comes after every active one.
    revoked = set(ApiKey.objects.filter(revoked_at__isnull=False).values_list("pk", flat=True))
    flags = [pk in revoked for pk in ids]
    assert flags == sorted(flags)


@pytest.mark.postgres
def test_last_used_is_one_probe_of_the_key_s_index(organization: Organization) -> None:
    """The newest run of a key is read through `run_key_accepted`, never by scanning runs."""
    key = key_create(organization=organization, name="indexed").key
    newest = Run.objects.filter(api_key=key).order_by("-accepted_at").values("accepted_at")[:1]
    plan = query_plan(newest)
    assert "run_key_accepted" in plan, plan
    # The index gives the order: no sort of the key's runs (in Postgres, a merge of each day
    # partition's index in order).
    assert not re.search(r"(^|->  )(Incremental )?Sort ", plan, re.MULTILINE), plan


def test_keys_made_and_revoked_on_the_command_line_are_audited(
    organization: Organization,
) -> None:
    out = io.StringIO()
    call_command(
        "createkey",
        organization.name,
        "--name",
        "cli",
        "--rpm",
        "30",
        stdout=out,
        stderr=io.StringIO(),
    )
    key = ApiKey.objects.get(organization=organization)
    assert key.digest == key_digest(out.getvalue().strip())
    call_command("revokekey", key.prefix, stdout=io.StringIO())
    changes = KeyChange.objects.filter(key=key).order_by("at", "id")
    assert [(c.action, c.actor, c.actor_name, c.detail) for c in changes] == [
        ("created", None, "manage.py createkey", "30 requests/min"),
        ("revoked", None, "manage.py revokekey", ""),
    ]
