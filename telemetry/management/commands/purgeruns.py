from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Organization
from telemetry.services.retention import BATCH_SIZE, runs_purge_expired


class Command(BaseCommand):
    help = (
        "Delete runs older than their organization's retention days and strip the content "
        "`metadata` retention forbids (what the hourly Celery task does)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--organization", default=None, help="Only this organization (by name)."
        )
        parser.add_argument(
            "--batch-size", type=int, default=BATCH_SIZE, help="Rows per delete or update."
        )

    def handle(
        self, *args: object, organization: str | None, batch_size: int, **options: object
    ) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        organization_ids = None
        if organization is not None:
            org = Organization.objects.filter(name=organization).first()
            if org is None:
                raise CommandError(f"There is no organization named {organization!r}.")
            organization_ids = [org.pk]
        counts = runs_purge_expired(organization_ids=organization_ids, batch_size=batch_size)
        self.stdout.write(
            f"Deleted {counts.runs_deleted} runs and {counts.chunks_deleted} chunks; "
            f"stripped the content of {counts.runs_stripped} runs."
        )
