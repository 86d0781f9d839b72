"""Every number an operator sets — prices, budgets, rate limits, retention, timeouts, the
context window, the scripted pace — is checked against its bounds wherever it is set
(`applyconfig`, the admin's forms), refused with an error naming the field, and never stored;
the database refuses a price or budget its column cannot hold, so nothing stored can make a
read of the catalog or of a budget fail."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import DatabaseError, transaction
from django.test import Client

from accounts.models import ApiKey, Organization
from gateway.models import CatalogModel, Deployment

pytestmark = pytest.mark.django_db

DEPLOYMENT = "deployments:\n  - name: bounded\n    {field}\n"
MODEL = (
    "deployments:\n  - name: bounded\n"
    "models:\n  - id: bounded-model\n    deployment: bounded\n    {field}\n"
)
ORGANIZATION = "organizations:\n  - name: bounded-org\n    {field}\n"


def apply(tmp_path: Path, text: str) -> None:
    path = tmp_path / "mortar.yaml"
    path.write_text(text)
    call_command("applyconfig", str(path), stdout=StringIO())


@pytest.mark.parametrize(
    ("template", "field", "named"),
    [
        (MODEL, "prices: {input: 1000000}", "models[bounded-model].prices.input"),
        (MODEL, "prices: {cached_input: -0.5}", "models[bounded-model].prices.cached_input"),
        (MODEL, "prices: {output: 0.0000001}", "models[bounded-model].prices.output"),
        (MODEL, "context_window: 2147483648", "models[bounded-model].context_window"),
        (MODEL, "context_window: 0", "models[bounded-model].context_window"),
        (DEPLOYMENT, "timeouts: {total: .inf}", "deployments[bounded].timeouts.total"),
        (DEPLOYMENT, "timeouts: {total: .nan}", "deployments[bounded].timeouts.total"),
        (DEPLOYMENT, "timeouts: {first_byte: 86401}", "deployments[bounded].timeouts.first_byte"),
        (DEPLOYMENT, "timeouts: {connect: 0}", "deployments[bounded].timeouts.connect"),
        (
            DEPLOYMENT,
            "timeouts: {between_chunks: -1}",
            "deployments[bounded].timeouts.between_chunks",
        ),
        (DEPLOYMENT, "scripted_delay_ms: 60001", "deployments[bounded].scripted_delay_ms"),
        (ORGANIZATION, "budget: {usd: 100000000}", "organizations[bounded-org].budget.usd"),
        (
            ORGANIZATION,
            "rate_limits: {requests_per_minute: 2147483648}",
            "organizations[bounded-org].rate_limits.requests_per_minute",
        ),
        (
            ORGANIZATION,
            "rate_limits: {tokens_per_minute: 2147483648}",
            "organizations[bounded-org].rate_limits.tokens_per_minute",
        ),
        (ORGANIZATION, "retention_days: 36501", "organizations[bounded-org].retention_days"),
    ],
)
def test_applyconfig_refuses_a_number_out_of_bounds_naming_its_field(
    tmp_path: Path, template: str, field: str, named: str
) -> None:
    with pytest.raises(CommandError) as refused:
        apply(tmp_path, template.format(field=field))

    assert f"{named}: " in str(refused.value)
    assert not Deployment.objects.filter(name="bounded").exists()
    assert not CatalogModel.objects.filter(id="bounded-model").exists()
    assert not Organization.objects.filter(name="bounded-org").exists()


def test_applyconfig_takes_the_bounds_themselves(tmp_path: Path) -> None:
    apply(
        tmp_path,
        "deployments:\n  - name: bounded\n    scripted_delay_ms: 60000\n"
        "    timeouts: {connect: 0.001, first_byte: 86400, between_chunks: 1, total: 86400}\n"
        "models:\n  - id: bounded-model\n    deployment: bounded\n"
        "    context_window: 2147483647\n"
        "    prices: {input: 999999.999999, cached_input: 0, output: 0.000001}\n"
        "organizations:\n  - name: bounded-org\n    retention_days: 36500\n"
        "    budget: {usd: 99999999.999999, period: total}\n"
        "    rate_limits: {requests_per_minute: 2147483647, tokens_per_minute: 1}\n",
    )
    model = CatalogModel.objects.get(id="bounded-model")
    assert model.prices.input == Decimal("999999.999999")
    assert Organization.objects.get(name="bounded-org").budget_usd == Decimal("99999999.999999")
    assert Deployment.objects.get(name="bounded").total_timeout_s == 86400


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("bounds-admin"))
    return client


def deployment_form(**fields: str) -> dict[str, str]:
    return {
        "name": "bounded",
        "kind": Deployment.Kind.SCRIPTED,
        "optimizer_mode": Deployment.OptimizerMode.SHADOW,
        "stream_default": "on",
        "scripted_delay_ms": "0",
        "upstreams": "[]",
        "upstream_model": "",
        "api_key_env": "",
        "connect_timeout_s": "5",
        "first_byte_timeout_s": "60",
        "chunk_timeout_s": "60",
        "total_timeout_s": "600",
        "extra_fields": "[]",
        "usage_count": Deployment.UsageCount.ESTIMATE,
        "chat_template": "",
        **fields,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("total_timeout_s", "86401"),
        ("total_timeout_s", "inf"),
        ("connect_timeout_s", "0"),
        ("scripted_delay_ms", "60001"),
    ],
)
def test_the_admin_refuses_a_deployment_number_out_of_bounds(
    admin_client: Client, field: str, value: str
) -> None:
    response = admin_client.post(
        "/admin/gateway/deployment/add/", deployment_form(**{field: value})
    )

    assert response.status_code == 200  # the form again, with its errors
    assert list(response.context["adminform"].form.errors) == [field]
    assert not Deployment.objects.filter(name="bounded").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("price_input", "1000000"),
        ("price_cached_input", "-1"),
        ("price_output", "0.0000001"),
        ("context_window", "2147483648"),
    ],
)
def test_the_admin_refuses_a_model_number_out_of_bounds(
    admin_client: Client, field: str, value: str
) -> None:
    deployment = Deployment.objects.create(name="bounded")
    form = {
        "id": "bounded-model",
        "deployment": str(deployment.pk),
        "context_window": "4096",
        "owned_by": "mortar",
        "surfaces": CatalogModel.Surfaces.BOTH,
        "price_input": "0",
        "price_cached_input": "0",
        "price_output": "0",
        field: value,
    }
    response = admin_client.post("/admin/gateway/catalogmodel/add/", form)

    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == [field]
    assert not CatalogModel.objects.filter(id="bounded-model").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("budget_usd", "100000000"),
        ("budget_usd", "0"),
        ("requests_per_minute", "0"),
        ("tokens_per_minute", "2147483648"),
        ("retention_days", "36501"),
        ("retention_days", "0"),
    ],
)
def test_the_admin_refuses_an_organization_number_out_of_bounds(
    admin_client: Client, field: str, value: str
) -> None:
    form = {
        "name": "bounded-org",
        "budget_period": "month",
        "retention": Organization.Retention.FULL,
        "retention_days": "30",
        "optimize_default": Organization.OptimizeDefault.ON,
        field: value,
    }
    response = admin_client.post("/admin/accounts/organization/add/", form)

    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == [field]
    assert not Organization.objects.filter(name="bounded-org").exists()


@pytest.mark.parametrize("price", ["price_input", "price_cached_input", "price_output"])
def test_the_database_refuses_a_price_its_column_cannot_hold(price: str) -> None:
    model = CatalogModel.objects.create(id="bounded-model")
    with pytest.raises(DatabaseError), transaction.atomic():
        CatalogModel.objects.filter(id=model.id).update(**{price: Decimal("1000000")})

    # Every read of the catalog still works.
    assert CatalogModel.objects.get(id=model.id).prices.input == 0
    assert CatalogModel.objects.count() >= 1


def test_the_database_refuses_a_budget_its_column_cannot_hold() -> None:
    organization = Organization.objects.create(name="bounded-org")
    key = ApiKey.objects.create(organization=organization, prefix="bnd", digest="b" * 64)
    for model, pk in ((Organization, organization.pk), (ApiKey, key.pk)):
        with pytest.raises(DatabaseError), transaction.atomic():
            model.objects.filter(pk=pk).update(budget_usd=Decimal("100000000"))
        assert model.objects.get(pk=pk).budget_usd is None
