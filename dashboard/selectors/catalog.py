"""The choices the dashboard's filters offer: organizations, keys, models, deployments."""

from __future__ import annotations

from accounts.models import ApiKey, Organization
from gateway.models import CatalogModel, Deployment


def organization_choices() -> list[tuple[int, str]]:
    return list(Organization.objects.order_by("name").values_list("pk", "name"))


def key_choices() -> list[tuple[int, str]]:
    """Every key as "organization / prefix… name", revoked ones marked."""
    keys = ApiKey.objects.select_related("organization").order_by("organization__name", "prefix")
    return [
        (
            key.pk,
            f"{key.organization.name} / {key.prefix}… {key.name}".rstrip()
            + ("" if key.is_active else " (revoked)"),
        )
        for key in keys
    ]


def key_labels(ids: set[int]) -> dict[int, str]:
    return {
        key.pk: f"{key.prefix}… {key.name}".rstrip()
        for key in ApiKey.objects.filter(pk__in=ids).only("pk", "prefix", "name")
    }


def organization_names(ids: set[int]) -> dict[int, str]:
    return dict(Organization.objects.filter(pk__in=ids).values_list("pk", "name"))


def model_names() -> list[str]:
    return list(CatalogModel.objects.order_by("id").values_list("id", flat=True))


def deployment_names() -> list[str]:
    return list(Deployment.objects.order_by("name").values_list("name", flat=True))
