"""The Keys page sets a new key's policy: the models it may use and when it expires (UTC); the
dashboard never sends a request with an expired key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from accounts.models import ApiKey, KeyChange, Organization
from accounts.services import KeyPolicy, key_create
from gateway.models import CatalogModel, Deployment

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("policy-staff", is_staff=True))
    return client


@pytest.fixture
def organization() -> Organization:
    deployment = Deployment.objects.get(name="scripted")
    for model_id in ("policy-a", "policy-b"):
        CatalogModel.objects.create(id=model_id, deployment=deployment, context_window=4096)
    return Organization.objects.create(name="policy-org")


def create(client: Client, organization: Organization, **fields: object):
    data = {"organization": organization.pk, "name": "scoped", "budget_period": "month", **fields}
    return client.post("/dashboard/keys/", data)


def test_a_key_made_on_the_page_carries_its_models_and_expiry(
    staff: Client, organization: Organization
) -> None:
    response = create(
        staff, organization, models=["policy-a", "policy-b"], expires_at="2031-03-04T05:06"
    )
    assert response.status_code == 201
    key = ApiKey.objects.get(organization=organization)
    assert key.allowed_models == ["policy-a", "policy-b"]
    assert key.expires_at == datetime(2031, 3, 4, 5, 6, tzinfo=UTC)
    assert KeyChange.objects.get(key=key).detail == (
        "no limits of its own, models policy-a, policy-b, expires 2031-03-04 05:06 UTC"
    )
    page = response.content.decode()
    assert "only policy-a, policy-b" in page
    assert "expires 2031-03-04 05:06" in page


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"models": ["no-such-model"]}, "Select a valid choice"),
        ({"expires_at": "2001-01-01T00:00"}, "An expiry must be in the future."),
        ({"expires_at": "soon"}, "Enter a valid date/time."),
    ],
)
def test_the_page_refuses_a_bad_policy(
    staff: Client, organization: Organization, fields: dict[str, object], message: str
) -> None:
    response = create(staff, organization, **fields)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not ApiKey.objects.filter(organization=organization).exists()


def test_an_expired_key_is_listed_as_expired_and_never_offered_to_send_with(
    staff: Client, organization: Organization
) -> None:
    expired = key_create(
        organization=organization,
        name="old",
        policy=KeyPolicy(expires_at=timezone.now() - timedelta(minutes=1)),
    ).key
    current = key_create(organization=organization, name="current").key

    keys = staff.get("/dashboard/keys/").content.decode()
    assert "expired " in keys

    playground = staff.get("/dashboard/playground/").content.decode()
    assert f"{current.prefix}… current" in playground
    assert f"{expired.prefix}… old" not in playground
    sent = staff.post(
        "/dashboard/playground/send", {"key": expired.pk, "model": "policy-a", "prompt": "hi"}
    )
    assert sent.status_code == 400
    assert "key" in sent.json()["errors"]
