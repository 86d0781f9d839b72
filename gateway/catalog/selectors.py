"""Reads for the gateway: the model catalog."""

from __future__ import annotations

from django.conf import settings

from core.db import database_read
from core.lookups import lookup_cache
from gateway.errors import ModelNotAvailable, ModelNotFound
from gateway.models import CatalogModel, Deployment


async def model_resolve(name: str | None) -> tuple[CatalogModel, Deployment]:
    """The catalog entry for `model` (the default when absent) and the deployment that serves
    it.

    Raises `model_not_found` (404) for a name outside the catalog and `model_not_available`
    (503) for one that is listed but not deployed.
    """
    name = name or settings.MORTAR_DEFAULT_MODEL
    if "\x00" in name:  # no catalog id holds NUL, and Postgres text cannot even compare it
        raise ModelNotFound(f"The model {name!r} does not exist.", param="model")

    def load() -> CatalogModel | None:
        models = CatalogModel.objects.select_related("deployment")
        return models.filter(pk=name).first() or models.filter(id__iexact=name).first()

    model = await lookup_cache().get("model", name, load)
    if model is None:
        raise ModelNotFound(f"The model `{name}` does not exist.", param="model")
    deployment = model.deployment if model.deployed else None
    if deployment is None:
        raise ModelNotAvailable(
            f"The model `{model.id}` is in the catalog but not deployed yet.", param="model"
        )
    return model, deployment


async def model_list() -> list[CatalogModel]:
    return await database_read(lambda: list(CatalogModel.objects.order_by("id")))
