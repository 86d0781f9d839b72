"""Fixtures for catalog models beyond the default one, committed for the server processes: models
served on one API surface only, one that reads images, one that is listed but not deployed."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.models import CatalogModel, Deployment


@dataclass(frozen=True)
class SurfaceModels:
    openai_only: str
    anthropic_only: str
    vision: str


def _scripted_model(model_id: str, **fields: object) -> str:
    deployment = Deployment.objects.get(name="scripted")
    CatalogModel.objects.update_or_create(
        id=model_id, defaults={"deployment": deployment, "context_window": 4096, **fields}
    )
    return model_id


@pytest.fixture(scope="session")
def surface_models(
    django_db_setup: None, django_db_blocker, sees_other_connections: None
) -> SurfaceModels:
    """Scripted models served on one surface each, and one with vision on both."""
    with django_db_blocker.unblock():
        return SurfaceModels(
            openai_only=_scripted_model("openai-only", surfaces=CatalogModel.Surfaces.OPENAI),
            anthropic_only=_scripted_model(
                "anthropic-only", surfaces=CatalogModel.Surfaces.ANTHROPIC
            ),
            vision=_scripted_model("vision-scripted", vision=True),
        )


@pytest.fixture(scope="session")
def undeployed_model(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> str:
    with django_db_blocker.unblock():
        return _scripted_model("listed-not-deployed", deployed=False)


@pytest.fixture(scope="session")
def priced_model(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> str:
    """A scripted model with prices: 1 per million input tokens, 2 per million output."""
    with django_db_blocker.unblock():
        return _scripted_model("priced-scripted", price_input=1, price_output=2)
