"""What the dashboard sends requests with (the playground, re-runs): keys staff may choose and
models that can answer."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.models import ApiKey
from dashboard.selectors.scope import of_organizations
from gateway.models import CatalogModel


def _usable() -> QuerySet[ApiKey]:
    """Keys a request may be sent with: not revoked, not expired (the dashboard sends without
    the key's secret, so the API's own check of them does not run)."""
    return ApiKey.objects.select_related("organization").filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()), revoked_at__isnull=True
    )


def active_key_choices(
    *, organization_id: int | None = None, organizations: frozenset[int] | None = None
) -> list[tuple[int, str]]:
    """Usable keys as "organization / prefix… name" (one organization's only when given, and
    only `organizations`' when given): a request sent from the dashboard is a run of the key's
    organization."""
    keys = of_organizations(_usable(), organization_id, organizations)
    return [
        (key.pk, f"{key.organization.name} / {key.prefix}… {key.name}".rstrip())
        for key in keys.order_by("organization__name", "prefix")
    ]


def active_key(key_id: int) -> ApiKey | None:
    """The key to send as, its organization loaded (the pipeline reads it), if usable."""
    return _usable().filter(pk=key_id).first()


def servable_model_names() -> list[str]:
    """Models a request may name and get an answer from (deployed, with a deployment)."""
    return list(
        CatalogModel.objects.filter(deployed=True, deployment__isnull=False)
        .order_by("id")
        .values_list("id", flat=True)
    )
