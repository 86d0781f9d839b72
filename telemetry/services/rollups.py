"""Hourly usage rollups: runs summed per hour, organization, key, end user, model, deployment.

The dashboard reads these rows instead of scanning runs, so its pages stay fast however many
runs are stored. Decisions:

- **Whole hours are recomputed**, never incremented: an hour's rows are rebuilt from its runs
  (by `accepted_at`) in one transaction, so running twice, or two workers at once, gives the
  same rows, and a run written late (the writer's spool drained after an outage, a long
  stream finishing) is counted when its hour is recomputed.
- **Which hours**: those with a run accepted or finished since a watermark. The task keeps the
  watermark in the cache (Redis): each refresh starts at the earlier of "`hours` ago" and the
  start of the last successful refresh, bounded by `MAX_CATCH_UP`, so a worker that was down
  catches up. Runs finishing more than `LATE_FINISH_WINDOW` after acceptance are not looked
  for (this keeps the search on the `accepted_at` index; `finished_at` has none).
- **In-progress runs are left out**: a run counts once it has an outcome, in the hour it was
  accepted; that hour is recomputed because the run's `finished_at` is recent. So every run
  counted has finished, and `latency_ms_sum / requests` is the mean latency. A run whose
  worker crashed is counted once it is closed as `interrupted` (within the worker lease).
- **An error** is a run that did not deliver its answer: status `failed`, `refused` or
  `interrupted`, or any HTTP status >= 400. `stopped` and `cancelled` runs are not errors (the
  client chose so); a stream that failed after its 200 is (status `failed`).
- Nulls count as 0; a shared (deduplicated) run counts as a request, its cost is already 0.
- Latency and time to first token are summed as intervals and floored to milliseconds.
- Recomputing an hour whose runs retention has purged would shrink its rows: recompute old
  hours only while their runs are stored (the automatic refresh only looks back `hours`).
- **Usage breakdowns** (telemetry/services/breakdowns.py): each hour's rollups summed again per
  breakdown, recomputed with the hour; a day's by the refresh whose window it ends in, or a
  later one that recomputes one of its hours (`usage_breakdown_days_ended`; a caller of
  `usage_rollup_hour_recompute` alone leaves the day's breakdowns to the next refresh).
- **Without beat** (the embedded default: no Redis, so no broker beat could send to), the
  dashboard's pages that read rollups refresh them in-process first
  (`usage_rollups_keep_fresh`, at most every `IN_PROCESS_EVERY`; `MORTAR_ROLLUPS_IN_PROCESS`).
  The first refresh of a process looks back `MAX_CATCH_UP`, as there is no watermark yet.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.core.cache import cache
from django.db import transaction
from django.db.models import BigIntegerField, Count, DecimalField, F, Q, Sum, Value
from django.db.models.functions import Coalesce, TruncHour
from django.utils import timezone

from telemetry.models import Run, UsageBreakdown, UsageRollup
from telemetry.services.breakdowns import ONE_DAY, day_of, usage_breakdowns_recompute

logger = logging.getLogger(__name__)

ONE_HOUR = timedelta(hours=1)
LATE_FINISH_WINDOW = timedelta(hours=24)
MAX_CATCH_UP = timedelta(days=7)
WATERMARK_KEY = "telemetry:usage-rollups:watermark"
IN_PROCESS_EVERY = timedelta(minutes=1)
IN_PROCESS_KEY = "telemetry:usage-rollups:in-process"

IS_ERROR = Q(status__in=[Run.Status.FAILED, Run.Status.REFUSED, Run.Status.INTERRUPTED]) | Q(
    http_status__gte=400
)
GROUP_FIELDS = ["hour", "organization", "api_key_id", "end_user", "model", "deployment"]
MEASURE_FIELDS = [
    "requests",
    "errors",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost",
    "latency_ms_sum",
    "ttft_ms_sum",
    "ttft_count",
]


@dataclass(frozen=True)
class RollupCounts:
    hours: int = 0
    rows: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def usage_rollups_catch_up(*, hours: int, now: datetime | None = None) -> RollupCounts:
    """Recompute the hours touched since the watermark (at least `hours` back); move it on."""
    now = now or timezone.now()
    since = now - timedelta(hours=hours)
    watermark = cache.get(WATERMARK_KEY)
    if isinstance(watermark, datetime):
        since = max(min(since, watermark), now - MAX_CATCH_UP)
    counts = usage_rollups_refresh(since=since, until=now)
    # Only after success: a refresh that failed is retried from the old watermark.
    cache.set(WATERMARK_KEY, now, timeout=None)
    return counts


def usage_rollups_watermark() -> datetime | None:
    """When the last refresh that moved the watermark started (its rows hold every run
    finished by then), or None when none has."""
    watermark = cache.get(WATERMARK_KEY)
    return watermark if isinstance(watermark, datetime) else None


def usage_rollups_keep_fresh(*, now: datetime | None = None) -> RollupCounts | None:
    """Catch the rollups up in-process, unless that was done in the last `IN_PROCESS_EVERY`."""
    if not cache.add(IN_PROCESS_KEY, True, timeout=IN_PROCESS_EVERY.total_seconds()):
        return None
    first = cache.get(WATERMARK_KEY) is None
    hours = MAX_CATCH_UP // ONE_HOUR if first else 2
    return usage_rollups_catch_up(hours=hours, now=now)


def usage_rollups_refresh(*, since: datetime, until: datetime | None = None) -> RollupCounts:
    """Recompute every hour with a run accepted or finished in [since, until)."""
    hours = usage_rollup_hours_touched(since=since, until=until)
    rows = sum(usage_rollup_hour_recompute(hour=hour) for hour in hours)
    for day in usage_breakdown_days_ended(since=since, until=until or timezone.now(), hours=hours):
        usage_breakdowns_recompute(span=UsageBreakdown.Span.DAY, start=day)
    if hours:
        logger.info("usage rollups: %d hours recomputed, %d rows", len(hours), rows)
    return RollupCounts(hours=len(hours), rows=rows)


def usage_breakdown_days_ended(
    *, since: datetime, until: datetime, hours: list[datetime]
) -> list[datetime]:
    """The days whose breakdowns a refresh of [since, until) recomputes, after their hours:
    those that ended in it, and those over before it with an hour recomputed (a run finished
    late).

    A day's breakdowns are read only once it is over (the Spend page reads the running day by
    the hour), so the running day's are not rewritten at every refresh; and a day ends in some
    refresh's window, as each starts at the last one's watermark, so a quiet night is not
    missed.
    """
    days = {day_of(hour) for hour in hours}
    midnight = day_of(since) + ONE_DAY
    while midnight <= until:
        days.add(midnight - ONE_DAY)
        midnight += ONE_DAY
    return sorted(day for day in days if day + ONE_DAY <= until)


def usage_rollup_hours_touched(*, since: datetime, until: datetime | None = None) -> list[datetime]:
    """Return the hours (by `accepted_at`) of runs accepted or finished in [since, until)."""
    accepted = Q(accepted_at__gte=since)
    finished = Q(finished_at__gte=since)
    if until is not None:
        accepted &= Q(accepted_at__lt=until)
        finished &= Q(finished_at__lt=until)
    runs = Run.objects.filter(accepted_at__gte=since - LATE_FINISH_WINDOW).filter(
        accepted | finished
    )
    return list(
        runs.annotate(hour=TruncHour("accepted_at", tzinfo=UTC))
        .order_by("hour")
        .values_list("hour", flat=True)
        .distinct()
    )


@transaction.atomic
def usage_rollup_hour_recompute(*, hour: datetime) -> int:
    """Replace the hour's rollup rows with sums of its finished runs; return the row count."""
    hour = hour.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    rows = _hour_rows(hour)
    UsageRollup.objects.filter(hour=hour).delete()
    # Upsert rather than insert: a refresh of the same hour committing meanwhile (another
    # worker) must not make this one fail; the last to commit wins, both computed the same.
    UsageRollup.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=GROUP_FIELDS,
        update_fields=MEASURE_FIELDS,
    )
    usage_breakdowns_recompute(span=UsageBreakdown.Span.HOUR, start=hour)
    return len(rows)


def _hour_rows(hour: datetime) -> list[UsageRollup]:
    groups = (
        Run.objects.filter(accepted_at__gte=hour, accepted_at__lt=hour + ONE_HOUR)
        .exclude(status=Run.Status.IN_PROGRESS)
        .annotate(key_id=Coalesce(F("api_key"), Value(0), output_field=BigIntegerField()))
        .values("organization", "key_id", "end_user", "model", "deployment")
        .annotate(
            requests=Count("pk"),
            errors=Count("pk", filter=IS_ERROR),
            prompt=_sum("prompt_tokens"),
            completion=_sum("completion_tokens"),
            cached=_sum("cached_tokens"),
            cost_sum=Coalesce(
                Sum("cost"),
                Value(Decimal(0)),
                output_field=DecimalField(max_digits=20, decimal_places=9),
            ),
            latency=Sum(F("finished_at") - F("accepted_at")),
            ttft=Sum(F("first_token_at") - F("accepted_at")),
            ttft_count=Count("pk", filter=Q(first_token_at__isnull=False)),
        )
        .order_by()
    )
    return [
        UsageRollup(
            hour=hour,
            organization_id=group["organization"],
            api_key_id=group["key_id"],
            end_user=group["end_user"],
            model=group["model"],
            deployment=group["deployment"],
            requests=group["requests"],
            errors=group["errors"],
            prompt_tokens=group["prompt"],
            completion_tokens=group["completion"],
            cached_tokens=group["cached"],
            cost=group["cost_sum"],
            latency_ms_sum=_ms(group["latency"]),
            ttft_ms_sum=_ms(group["ttft"]),
            ttft_count=group["ttft_count"],
        )
        for group in groups
    ]


def _sum(field: str) -> Coalesce:
    return Coalesce(Sum(field), Value(0), output_field=BigIntegerField())


def _ms(duration: timedelta | None) -> int:
    return duration // timedelta(milliseconds=1) if duration else 0
