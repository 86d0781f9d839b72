"""Make sure the demo organization and its key exist; print the key and how to call Mortar."""

import os

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import KeyOperationError, demo_bootstrap

FIRST_REQUEST = '{"messages": [{"role": "user", "content": "What does max_tokens limit?"}]}'


class Command(BaseCommand):
    help = (
        "Make sure the demo organization and its API key exist, and print the key. "
        "MORTAR_BOOTSTRAP_KEY, when set, is the demo key's secret."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--base-url",
            default="",
            help="The address the server is about to serve on (`make serve` passes it): "
            "printed with the commands that call it, so the README's examples work as shown.",
        )

    def handle(self, *args: object, base_url: str, **options: object) -> None:
        try:
            _, secret = demo_bootstrap(secret=os.environ.get("MORTAR_BOOTSTRAP_KEY") or None)
        except KeyOperationError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Demo organization 'demo', API key: {secret}")
        if base_url:
            self.stdout.write(usage(base_url.rstrip("/"), secret))


def usage(base_url: str, secret: str) -> str:
    """The lines `make serve` prints before serving: where, and a first request to paste."""
    return (
        f"Mortar will serve on {base_url} (the dashboard: {base_url}/dashboard/). Try it:\n"
        f"  export MORTAR_URL={base_url} MORTAR_API_KEY={secret}\n"
        '  curl "$MORTAR_URL/v1/chat/completions" -H "Authorization: Bearer $MORTAR_API_KEY" \\\n'
        "    -H 'Content-Type: application/json' \\\n"
        f"    -d '{FIRST_REQUEST}'"
    )
