"""Only staff see the dashboard; every action needs its CSRF token; the admin shows a new key's
secret once."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.auth import key_digest
from accounts.models import ApiKey, Organization
from telemetry.models import Run

pytestmark = pytest.mark.django_db

PAGES = [
    "/dashboard/",
    "/dashboard/live/",
    "/dashboard/live/generations.json",
    "/dashboard/runs/",
    "/dashboard/runs/chatcmpl-000000000000000000000001/",
    "/dashboard/runs/chatcmpl-000000000000000000000001/replay",
    "/dashboard/runs/chatcmpl-000000000000000000000001/download",
    "/dashboard/sessions/",
    "/dashboard/audit/",
    "/dashboard/audit/?format=csv",
    "/dashboard/budgets/",
    "/dashboard/runs/chatcmpl-000000000000000000000001/rerun",
    "/dashboard/runs/chatcmpl-000000000000000000000001/compare/chatcmpl-000000000000000000000001/",
    "/dashboard/playground/",
    "/dashboard/keys/",
]


@pytest.fixture
def a_run() -> Run:
    organization = Organization.objects.create(name="perm-org")
    return Run.objects.create(
        id="chatcmpl-000000000000000000000001",
        organization=organization,
        status=Run.Status.COMPLETED,
        accepted_at=datetime(2030, 1, 1, tzinfo=UTC),
        stream=True,
    )


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("perm-staff", is_staff=True))
    return client


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_visitors_are_sent_to_sign_in(client: Client, a_run: Run, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/dashboard/login/?next=")


@pytest.mark.parametrize("path", PAGES)
def test_signed_in_non_staff_are_sent_to_sign_in(client: Client, a_run: Run, path: str) -> None:
    client.force_login(User.objects.create_user("perm-visitor", is_staff=False))
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/dashboard/login/?next=")


@pytest.mark.parametrize("path", PAGES)
def test_staff_get_every_page(staff_client: Client, a_run: Run, path: str) -> None:
    response = staff_client.get(path)
    assert response.status_code == 200, path


def test_the_sign_in_page_tells_non_staff_why(client: Client) -> None:
    client.force_login(User.objects.create_user("perm-visitor", is_staff=False))
    page = client.get("/dashboard/login/").content.decode()
    assert "perm-visitor is neither a staff account nor a member of an organization" in page


def test_stop_refuses_a_post_without_csrf_token(a_run: Run) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user("perm-staff", is_staff=True))
    response = client.post(f"/dashboard/runs/{a_run.pk}/stop", HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    assert b"CSRF" in response.content


def test_stop_with_csrf_token_answers_not_running(a_run: Run) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user("perm-staff", is_staff=True))
    page = client.get("/dashboard/live/").content.decode()
    token = re.search(r'id="csrf" value="([^"]+)"', page)[1]
    response = client.post(
        f"/dashboard/runs/{a_run.pk}/stop",
        HTTP_ACCEPT="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert response.status_code == 404
    assert response.json() == {"stopped": False, "id": a_run.pk}


def sent_from_the_dashboard(run: Run) -> bool:
    """Whether a re-run of `run` or any run from the dashboard (the playground) was stored."""
    return Run.objects.filter(rerun_of=run.pk).exists() or (
        Run.objects.filter(end_user__startswith="dashboard:perm-").exists()
    )


@pytest.mark.parametrize(
    "path",
    ["/dashboard/runs/chatcmpl-000000000000000000000001/rerun", "/dashboard/playground/send"],
)
def test_sending_refuses_a_post_without_csrf_token(a_run: Run, path: str) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user("perm-staff", is_staff=True))
    response = client.post(path, {"key": "1", "model": "x", "prompt": "hi", "request": "{}"})
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert not sent_from_the_dashboard(a_run)


@pytest.mark.parametrize(
    "path",
    ["/dashboard/runs/chatcmpl-000000000000000000000001/rerun", "/dashboard/playground/send"],
)
def test_non_staff_cannot_send(client: Client, a_run: Run, path: str) -> None:
    client.force_login(User.objects.create_user("perm-visitor", is_staff=False))
    response = client.post(path, {"key": "1", "model": "x", "prompt": "hi", "request": "{}"})
    assert response.status_code == 302
    assert not sent_from_the_dashboard(a_run)


def test_stop_answers_get_with_405(staff_client: Client, a_run: Run) -> None:
    assert staff_client.get(f"/dashboard/runs/{a_run.pk}/stop").status_code == 405


def test_anonymous_stop_is_sent_to_sign_in_and_stops_nothing(client: Client, a_run: Run) -> None:
    response = client.post(f"/dashboard/runs/{a_run.pk}/stop")
    assert response.status_code == 302
    a_run.refresh_from_db()
    assert a_run.status == Run.Status.COMPLETED


def test_assets_are_served_without_sign_in(client: Client) -> None:
    response = client.get("/dashboard/assets/dashboard/dashboard.css")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/css"
    assert client.get("/dashboard/assets/dashboard/vendor/uPlot.iife.min.js").status_code == 200
    assert client.get("/dashboard/assets/admin/css/base.css").status_code == 404
    assert client.get("/dashboard/assets/dashboard/../../config/settings.py").status_code == 404


def test_admin_creates_a_key_and_shows_its_secret_once(client: Client) -> None:
    organization = Organization.objects.create(name="admin-key-org")
    client.force_login(User.objects.create_superuser("perm-admin", password="x" * 12))
    response = client.post(
        "/admin/accounts/apikey/add/", {"organization": organization.pk, "name": "from admin"}
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    secret = re.search(r'<code id="key-secret"[^>]*>([^<]+)</code>', response.content.decode())[1]
    key = ApiKey.objects.get(organization=organization)
    assert key.name == "from admin"
    assert key.digest == key_digest(secret)
    assert key.prefix == secret[:11]
    # Not stored, and not shown again on the key's page.
    assert secret not in client.get(f"/admin/accounts/apikey/{key.pk}/change/").content.decode()
