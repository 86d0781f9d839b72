from datetime import datetime

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from telemetry.services.rollups import usage_rollups_catch_up, usage_rollups_refresh


def _moment(value: str) -> datetime:
    moment = parse_datetime(value)
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"{value!r} is not an ISO 8601 time with a zone (e.g. ...T10:00Z).")
    return moment


class Command(BaseCommand):
    help = (
        "Recompute the hourly usage rollups: the hours touched in the last --hours (what the "
        "Celery task does), or, with --since (and --until), every hour touched in that range."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--hours", type=int, default=2, help="How far back to look.")
        parser.add_argument("--since", default=None, help="Start of a range, ISO 8601.")
        parser.add_argument("--until", default=None, help="End of the range, ISO 8601.")

    def handle(
        self,
        *args: object,
        hours: int,
        since: str | None,
        until: str | None,
        **options: object,
    ) -> None:
        if since is not None:
            counts = usage_rollups_refresh(
                since=_moment(since), until=_moment(until) if until else None
            )
        elif until is not None:
            raise CommandError("--until needs --since.")
        else:
            if hours < 1:
                raise CommandError("--hours must be at least 1.")
            counts = usage_rollups_catch_up(hours=hours)
        self.stdout.write(f"Recomputed {counts.hours} hours: {counts.rows} rollup rows.")
