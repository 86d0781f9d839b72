"""The choices the dashboard's filters offer: organizations, keys, models, deployments, end
users and error codes. `organizations` limits them to those organizations' (None: every one's)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from accounts.models import ApiKey, Organization
from core.errors import MortarError
from dashboard.selectors.overview import fresh_since
from gateway.models import CatalogModel, Deployment
from telemetry.models import Run, UsageRollup
from telemetry.services.interruptions import WORKER_INTERRUPTED
from telemetry.services.rollups import usage_rollups_watermark

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
    limit: int = END_USER_CHOICES,
    organizations: frozenset[int] | None = None,
    *,
    now: datetime | None = None,
) -> list[str]:
    """The first `limit` end users, in order of their names: those of the usage rollups, and
    those of the runs from the hour of the rollups' last refresh on (`fresh_since`, the
    boundary Spend and the audit read at), so an end user is offered from their first run.

    Two loose index scans, one probe per end user (`min(end_user) > the previous one`), put
    together and cut in one query: over the rollups (`rollup_end_user_hour`: one table however
    many runs are stored), and over the recent runs (`run_end_user_accepted`, of the last
    hours' partitions only: the `accepted_at` bound prunes the others). Probing the runs of
    every partition took 1-3 s on a store of 60 days' partitions (each probe one per
    partition). Limited to some organizations, each probe also checks the row's organization.
    """
    if organizations is not None and not organizations:
        return []
    fresh = fresh_since(now or timezone.now(), usage_rollups_watermark())
    ids = sorted(organizations or ())
    rolled_up, rolled_up_params = _loose_scan("rolled_up", UsageRollup, ids, limit=limit)
    recent, recent_params = _loose_scan("recent", Run, ids, limit=limit, since=fresh)
    sql = f"""
        WITH RECURSIVE {rolled_up}, {recent}
        SELECT end_user FROM rolled_up WHERE end_user IS NOT NULL
        UNION
        SELECT end_user FROM recent WHERE end_user IS NOT NULL
        ORDER BY 1 LIMIT %s
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [*rolled_up_params, *recent_params, limit])
        return [row[0] for row in cursor.fetchall()]


def _loose_scan(
    name: str,
    model: type[Run] | type[UsageRollup],
    ids: list[int],
    *,
    limit: int,
    since: datetime | None = None,
) -> tuple[str, list[Any]]:
    """A recursive CTE `name(end_user, n)`: the first `limit` distinct end users of the
    model's table, of the organizations `ids` (if any) and, with `since`, of the rows accepted
    from then on (a run's `accepted_at`); with its parameters."""
    table = connection.ops.quote_name(model._meta.db_table)
    conditions: list[str] = []
    params: list[Any] = []
    if since is not None:
        conditions.append("t.accepted_at >= %s")
        params.append(connection.ops.adapt_datetimefield_value(since))
    if ids:
        conditions.append(f"t.organization_id IN ({', '.join(['%s'] * len(ids))})")
        params += ids
    also = "".join(f" AND {condition}" for condition in conditions)
    sql = f"""{name}(end_user, n) AS (
            SELECT (SELECT min(t.end_user) FROM {table} t WHERE t.end_user > ''{also}), 1
            UNION ALL
            SELECT (SELECT min(t.end_user) FROM {table} t WHERE t.end_user > {name}.end_user{also}),
                   {name}.n + 1
            FROM {name} WHERE {name}.end_user IS NOT NULL AND {name}.n < %s
        )"""
    return sql, [*params, *params, limit]


def error_codes() -> list[str]:
    """Every error code a run may carry: those of Mortar's errors and of runs cut short."""
    codes = set(RUN_ONLY_ERROR_CODES)
    pending: list[type[MortarError]] = [MortarError]
    while pending:
        kind = pending.pop()
        codes.add(kind.code)
        pending += kind.__subclasses__()
    return sorted(code for code in codes if code)
