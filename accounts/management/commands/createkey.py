from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Organization
from accounts.services import KeyOperationError, key_create


class Command(BaseCommand):
    help = "Create an API key for an organization and print its secret (shown only once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", help="The organization's name.")
        parser.add_argument("--name", default="", help="A label for the key.")
        parser.add_argument("--secret", default=None, help="Use this secret instead of a new one.")

    def handle(
        self, *args: object, organization: str, name: str, secret: str | None, **options: object
    ) -> None:
        org = Organization.objects.filter(name=organization).first()
        if org is None:
            raise CommandError(f"There is no organization named {organization!r}.")
        try:
            issued = key_create(organization=org, name=name, secret=secret)
        except KeyOperationError as exc:
            raise CommandError(str(exc)) from None
        # The secret alone on stdout, so scripts can capture it; the rest goes to stderr.
        self.stderr.write(f"Created key {issued.key.prefix}… for {org.name!r}; store it now.")
        self.stdout.write(issued.secret)
