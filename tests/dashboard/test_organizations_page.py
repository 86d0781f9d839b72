"""The Organizations page: each organization's settings, and its `finish_chunk_delta` switch,
through Django's test client: staff only, CSRF-checked, saved for the next request."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Organization

pytestmark = pytest.mark.django_db


@pytest.fixture
def organization() -> Organization:
    return Organization.objects.create(name="orgs-page-co")


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("orgs-staff", is_staff=True))
    return client


def switch_url(organization: Organization) -> str:
    return f"/dashboard/organizations/{organization.pk}/finish-chunk-delta"


def test_staff_see_every_organization_with_its_switch(
    staff_client: Client, organization: Organization
) -> None:
    page = staff_client.get("/dashboard/organizations/")

    assert page.status_code == 200
    text = page.content.decode()
    assert 'data-organization="orgs-page-co"' in text
    assert f'action="{switch_url(organization)}"' in text
    assert 'name="finish_chunk_delta" value="on">' in text  # unchecked: the default
    assert 'href="/dashboard/organizations/" class="on">Organizations</a>' in text


def test_staff_turn_it_on_and_off(staff_client: Client, organization: Organization) -> None:
    on = staff_client.post(switch_url(organization), {"finish_chunk_delta": "on"})

    assert on.status_code == 302
    assert on["Location"] == "/dashboard/organizations/"
    organization.refresh_from_db()
    assert organization.finish_chunk_delta is True
    page = staff_client.get("/dashboard/organizations/").content.decode()
    assert 'name="finish_chunk_delta" value="on" checked>' in page

    staff_client.post(switch_url(organization), {})  # an unchecked box sends nothing
    organization.refresh_from_db()
    assert organization.finish_chunk_delta is False


def test_an_unknown_organization_is_a_404_and_a_get_changes_nothing(
    staff_client: Client, organization: Organization
) -> None:
    missing = staff_client.post(
        f"/dashboard/organizations/{organization.pk + 1000}/finish-chunk-delta",
        {"finish_chunk_delta": "on"},
    )
    assert missing.status_code == 404
    assert staff_client.get(switch_url(organization)).status_code == 405
    organization.refresh_from_db()
    assert organization.finish_chunk_delta is False


def test_no_one_else_sees_or_changes_it(organization: Organization) -> None:
    visitor = Client()
    visitor.force_login(User.objects.create_user("orgs-visitor"))

    for client in (Client(), visitor):
        page = client.get("/dashboard/organizations/")
        assert page.status_code == 302
        assert page["Location"].startswith("/dashboard/login/")
        refused = client.post(switch_url(organization), {"finish_chunk_delta": "on"})
        assert refused.status_code == 302
    organization.refresh_from_db()
    assert organization.finish_chunk_delta is False


def test_the_switch_needs_the_csrf_token(organization: Organization) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user("orgs-csrf", is_staff=True))

    refused = client.post(switch_url(organization), {"finish_chunk_delta": "on"})

    assert refused.status_code == 403
    organization.refresh_from_db()
    assert organization.finish_chunk_delta is False
