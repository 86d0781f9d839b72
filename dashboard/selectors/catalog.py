"""The choices the dashboard's filters offer: organizations, keys, models, deployments, end
users and error codes. `organizations` limits them to those organizations' (None: every one's)."""

from __future__ import annotations

from django.db import connection

from accounts.models import ApiKey, Organization
from core.errors import MortarError
from gateway.models import CatalogModel, Deployment
from telemetry.models import Run
from telemetry.services.interruptions import WORKER_INTERRUPTED

END_USER_CHOICES = 1000
# Codes a run may carry that no error class raises: a client gone, a worker gone.
RUN_ONLY_ERROR_CODES = ("client_disconnected", "worker_shutdown", WORKER_INTERRUPTED)


def organization_choices(organizations: frozenset[int] | None = None) -> list[tuple[int, str]]:
    found = Organization.objects.order_by("name")
    if organizations is not None:
        found = found.filter(pk__in=organizations)
    return list(found.values_list("pk", "name"))


def key_choices(organizations: frozenset[int] | None = None) -> list[tuple[int, str]]:
    """Every key as "organization / prefix… name", revoked ones marked."""
    keys = ApiKey.objects.select_related("organization").order_by("organization__name", "prefix")
    if organizations is not None:
        keys = keys.filter(organization_id__in=organizations)
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


def end_user_names(
    limit: int = END_USER_CHOICES, organizations: frozenset[int] | None = None
) -> list[str]:
    """The first `limit` end users of the stored runs, in order of their names.

    A loose index scan over `run_end_user_accepted`: one probe of the index per end user
    (`min(end_user) > the previous one`), never a scan of the runs, however many there are.
    Limited to some organizations, each probe also checks the run's organization.
    """
    if organizations is not None and not organizations:
        return []
    table = connection.ops.quote_name(Run._meta.db_table)
    ids = sorted(organizations or ())
    placeholders = ", ".join(["%s"] * len(ids))
    first = f" AND organization_id IN ({placeholders})" if ids else ""
    later = f" AND r.organization_id IN ({placeholders})" if ids else ""
    sql = f"""
        WITH RECURSIVE seen(end_user, n) AS (
            SELECT (SELECT min(end_user) FROM {table} WHERE end_user > ''{first}), 1
            UNION ALL
            SELECT (SELECT min(r.end_user) FROM {table} r
                    WHERE r.end_user > seen.end_user{later}),
                   seen.n + 1
            FROM seen WHERE seen.end_user IS NOT NULL AND seen.n < %s
        )
        SELECT end_user FROM seen WHERE end_user IS NOT NULL
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [*ids, *ids, limit])
        return [row[0] for row in cursor.fetchall()]


def error_codes() -> list[str]:
    """Every error code a run may carry: those of Mortar's errors and of runs cut short."""
    codes = set(RUN_ONLY_ERROR_CODES)
    pending: list[type[MortarError]] = [MortarError]
    while pending:
        kind = pending.pop()
        codes.add(kind.code)
        pending += kind.__subclasses__()
    return sorted(code for code in codes if code)
