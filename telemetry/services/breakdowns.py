"""Usage breakdowns: the hourly rollups summed again per breakdown, by hour and by day.

The rollups are grouped by every column at once (organization x key x end user x model x
deployment); with many end users on many keys they hardly compress (about a row per run), so a
month of them is a million rows to read for each of the Spend page's breakdowns. A usage
breakdown keeps only the columns of one breakdown (its *grain*), so a month of spend per key is
thousands of rows. Decisions:

- **Derived from the rollups only**, recomputed whole like them (delete and insert in one
  transaction, an upsert so two refreshes at once do not fail): an hour's breakdowns with the
  hour's rollups, a day's once it is over (by the refresh whose window it ends in, and again
  if a late run changes one of its hours: `usage_breakdown_days_ended`). So breakdowns and
  rollups sum alike wherever the Spend page reads breakdowns (the running day it reads by the
  hour), and it agrees with the Overview (rollups), while a refresh every five minutes
  rewrites hours, not the running day's thousands of end-user rows.
- **`model` is kept** in the grains whose cache savings the page prices per model; the end
  users' grains leave it out (it would leave a row per run again), and the page prices the
  savings of the end users it lists from the rollups (`rollup_end_user_hour`).
- **End users by the hour are not broken down**: that grain is as large as the rollups. The
  page reads the rollups for those hours.
- **`end_user_all`**: end users over every organization (organization 0), for the page
  without an organization filter: one organization's end users summed together, not one row
  per organization and end user.
- **No foreign key** to the organization (0 stands for all of them): deleting an
  organization, which cascades to its runs and rollups, leaves its breakdowns (and its share
  of the `end_user_all` rows) in place until their hours and days are recomputed.
- Plain SQL (`INSERT … SELECT … GROUP BY … ON CONFLICT`), the same on Postgres and SQLite:
  the rows never travel through Python.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from telemetry.models import UsageBreakdown, UsageRollup

ONE_DAY = timedelta(days=1)
ONE_HOUR = timedelta(hours=1)

# Each grain: the rollup columns it keeps; the others are stored as their defaults.
BREAKDOWN_GRAINS: dict[str, tuple[str, ...]] = {
    "model": ("organization_id", "model"),
    "key": ("organization_id", "api_key_id", "model"),
    "deployment": ("organization_id", "deployment", "model"),
    "end_user": ("organization_id", "end_user"),
    "end_user_all": ("end_user",),
}
GRAINS_BY_SPAN = {
    UsageBreakdown.Span.HOUR: ("model", "key", "deployment"),
    UsageBreakdown.Span.DAY: tuple(BREAKDOWN_GRAINS),
}
KEY_COLUMNS = ("organization_id", "api_key_id", "end_user", "model", "deployment")
DEFAULTS = {
    "organization_id": "0",
    "api_key_id": "0",
    "end_user": "''",
    "model": "''",
    "deployment": "''",
}
SUMS = ("requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost")
TABLE = UsageBreakdown._meta.db_table


def day_of(moment: datetime) -> datetime:
    """The UTC day a moment falls in, as its first instant."""
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@transaction.atomic
def usage_breakdowns_recompute(*, span: str, start: datetime, table: str = TABLE) -> int:
    """Replace the breakdowns of the hour or day from `start` with sums of its rollups; return
    the row count. (`table`: the table as migration 0016 knew it, before its rename.)"""
    start = start.astimezone(UTC)
    end = start + (ONE_DAY if span == UsageBreakdown.Span.DAY else ONE_HOUR)
    adapt = connection.ops.adapt_datetimefield_value
    rows = 0
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE span = %s AND start = %s", [span, adapt(start)])
        for grain in GRAINS_BY_SPAN[UsageBreakdown.Span(span)]:
            params = [span, adapt(start), grain, adapt(start), adapt(end)]
            cursor.execute(_insert_sql(grain, table), params)
            rows += max(cursor.rowcount, 0)
    return rows


def _insert_sql(grain: str, table: str) -> str:
    kept = BREAKDOWN_GRAINS[grain]
    values = ", ".join(column if column in kept else DEFAULTS[column] for column in KEY_COLUMNS)
    sums = ", ".join(f"SUM({measure})" for measure in SUMS)
    unique = ", ".join(("span", "grain", "start", *KEY_COLUMNS))
    updates = ", ".join(f"{measure} = excluded.{measure}" for measure in SUMS)
    return (
        f"INSERT INTO {table} (span, start, grain, {', '.join(KEY_COLUMNS)}, {', '.join(SUMS)}) "
        f"SELECT %s, %s, %s, {values}, {sums} FROM {UsageRollup._meta.db_table} "
        f"WHERE hour >= %s AND hour < %s GROUP BY {', '.join(kept)} "
        # Stored in the order of the key's columns: one organization's rows of a day sit
        # together, so reading them touches a few pages rather than every page of the day.
        f"ORDER BY {', '.join(kept)} "
        f"ON CONFLICT ({unique}) DO UPDATE SET {updates}"
    )


def usage_breakdowns_backfill(*, until: datetime | None = None, table: str = TABLE) -> int:
    """Break down every hour the rollups hold, and every day of theirs over by `until` (now),
    once, for rollups made before breakdowns."""
    until = until or timezone.now()
    hours = list(UsageRollup.objects.order_by("hour").values_list("hour", flat=True).distinct())
    rows = 0
    for hour in hours:
        rows += usage_breakdowns_recompute(span=UsageBreakdown.Span.HOUR, start=hour, table=table)
    for day in sorted({day_of(hour) for hour in hours}):
        if day + ONE_DAY <= until:
            rows += usage_breakdowns_recompute(span=UsageBreakdown.Span.DAY, start=day, table=table)
    return rows
