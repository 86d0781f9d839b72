import os

from django.core.management.base import BaseCommand, CommandError

from accounts.services import KeyOperationError, demo_bootstrap


class Command(BaseCommand):
    help = (
        "Make sure the demo organization and its API key exist, and print the key. "
        "MORTAR_BOOTSTRAP_KEY, when set, is the demo key's secret."
    )

    def handle(self, *args: object, **options: object) -> None:
        try:
            _, secret = demo_bootstrap(secret=os.environ.get("MORTAR_BOOTSTRAP_KEY") or None)
        except KeyOperationError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Demo organization 'demo', API key: {secret}")
