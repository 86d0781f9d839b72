from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import KeyOperationError, key_revoke


class Command(BaseCommand):
    help = "Revoke the active API key with this visible prefix; it fails on its next request."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: object, prefix: str, **options: object) -> None:
        try:
            key = key_revoke(prefix=prefix)
        except KeyOperationError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Revoked key {key.prefix}… of {key.organization.name!r}.")
