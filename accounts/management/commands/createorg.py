from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError

from accounts.services import organization_create


class Command(BaseCommand):
    help = "Create an organization."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: object, name: str, **options: object) -> None:
        try:
            organization = organization_create(name=name)
        except (ValueError, IntegrityError) as exc:
            raise CommandError(f"Could not create the organization: {exc}") from None
        self.stdout.write(f"Created organization {organization.name!r} (id {organization.id}).")
