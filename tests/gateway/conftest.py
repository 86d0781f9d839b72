"""Fixtures of the gateway's tests: the priced models the budget tests use."""

from __future__ import annotations

import pytest

from gateway.models import CatalogModel, Deployment


def _priced(model_id: str, deployment: Deployment) -> str:
    CatalogModel.objects.update_or_create(
        id=model_id,
        defaults={
            "deployment": deployment,
            "context_window": 4096,
            "price_input": 1000,
            "price_output": 2000,
        },
    )
    return model_id


@pytest.fixture(scope="session")
def budget_model(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> str:
    with django_db_blocker.unblock():
        return _priced("budget-scripted", Deployment.objects.get(name="scripted"))


@pytest.fixture(scope="session")
def free_model(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> str:
    """A scripted model without prices: it costs nothing."""
    with django_db_blocker.unblock():
        CatalogModel.objects.update_or_create(
            id="budget-free-scripted",
            defaults={
                "deployment": Deployment.objects.get(name="scripted"),
                "context_window": 4096,
            },
        )
    return "budget-free-scripted"


@pytest.fixture(scope="session")
def slow_budget_model(
    django_db_setup: None, django_db_blocker, sees_other_connections: None
) -> str:
    """The same prices on a scripted model that pauses 200 ms between pieces."""
    with django_db_blocker.unblock():
        deployment, _ = Deployment.objects.get_or_create(
            name="scripted-budget-slow", defaults={"scripted_delay_ms": 200}
        )
        return _priced("budget-slow-scripted", deployment)
