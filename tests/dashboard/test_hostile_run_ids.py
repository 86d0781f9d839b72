"""Run ids that could name no run on the dashboard's run pages and the admin: a 404 (or the
admin's "not found"), never a 500 (`/dashboard/runs/%00/` once was one)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db

HOSTILE_IDS = ["%00", "chatcmpl-%00", "%01", "%0A", "%7F", "%C2%85", "x" * 41]
RUN_PAGES = ["{}/", "{}/replay", "{}/download", "{}/images/0"]


@pytest.fixture
def staff() -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(
        User.objects.create_user("hostile-ids-staff", is_staff=True, is_superuser=True)
    )
    return client


@pytest.mark.parametrize("page", RUN_PAGES)
@pytest.mark.parametrize("run_id", HOSTILE_IDS)
def test_a_run_page_for_an_id_that_names_no_run_is_not_found(
    staff: Client, run_id: str, page: str
) -> None:
    response = staff.get("/dashboard/runs/" + page.format(run_id))

    assert response.status_code == 404


@pytest.mark.parametrize("run_id", HOSTILE_IDS)
def test_stopping_an_id_that_names_no_run_is_not_found(staff: Client, run_id: str) -> None:
    response = staff.post(f"/dashboard/runs/{run_id}/stop", HTTP_ACCEPT="application/json")

    assert response.status_code == 404


@pytest.mark.parametrize("run_id", HOSTILE_IDS)
def test_the_admin_says_a_run_it_cannot_name_does_not_exist(staff: Client, run_id: str) -> None:
    response = staff.get(f"/admin/telemetry/run/{run_id}/change/")

    if run_id == "%0A":
        assert response.status_code == 404  # the admin's URL pattern matches no line break
        return
    # The admin's answer for a missing object: back to its index, saying so.
    assert response.status_code == 302
    assert response["Location"] == "/admin/"
