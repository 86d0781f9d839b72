"""What the dashboard sends requests with (the playground, re-runs): keys staff may choose and
models that can answer."""

from __future__ import annotations

from accounts.models import ApiKey
from gateway.models import CatalogModel


def active_key_choices(*, organization_id: int | None = None) -> list[tuple[int, str]]:
    """Keys that are not revoked, as "organization / prefix… name" (one organization's only
    when given): a request sent from the dashboard is a run of the key's organization."""
    keys = ApiKey.objects.select_related("organization").filter(revoked_at__isnull=True)
    if organization_id is not None:
        keys = keys.filter(organization_id=organization_id)
    return [
        (key.pk, f"{key.organization.name} / {key.prefix}… {key.name}".rstrip())
        for key in keys.order_by("organization__name", "prefix")
    ]


def active_key(key_id: int) -> ApiKey | None:
    """The key to send as, its organization loaded (the pipeline reads it), unless revoked."""
    return (
        ApiKey.objects.select_related("organization")
        .filter(pk=key_id, revoked_at__isnull=True)
        .first()
    )


def servable_model_names() -> list[str]:
    """Models a request may name and get an answer from (deployed, with a deployment)."""
    return list(
        CatalogModel.objects.filter(deployed=True, deployment__isnull=False)
        .order_by("id")
        .values_list("id", flat=True)
    )
