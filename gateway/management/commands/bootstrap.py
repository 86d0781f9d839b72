"""Make sure the demo organization, its key and a dashboard sign-in exist; print them and how
to call Mortar."""

import os

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Organization
from accounts.services import (
    DEMO_ORGANIZATION,
    KeyOperationError,
    SignIn,
    demo_bootstrap,
    operator_bootstrap,
)
from gateway.catalog.demo import DEMO_MODEL, demo_prices_set

FIRST_REQUEST = '{"messages": [{"role": "user", "content": "What does max_tokens limit?"}]}'


class Command(BaseCommand):
    help = (
        "Make sure the demo organization and its API key exist, and print the key; on a "
        "database without a staff account, make the dashboard sign-in `admin` (its generated "
        "password is kept in var/dashboard-password) and print it. The first time, the demo "
        "model gets example prices. MORTAR_BOOTSTRAP_KEY, when set, is the demo key's secret."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--base-url",
            default="",
            help="The address the server is about to serve on (`make serve` passes it): "
            "printed with the commands that call it, so the README's examples work as shown.",
        )

    def handle(self, *args: object, base_url: str, **options: object) -> None:
        first_run = not Organization.objects.filter(name=DEMO_ORGANIZATION).exists()
        try:
            _, secret = demo_bootstrap(secret=os.environ.get("MORTAR_BOOTSTRAP_KEY") or None)
        except KeyOperationError as exc:
            raise CommandError(str(exc)) from None
        # Only the first time: prices an operator later sets to zero stay zero.
        priced = first_run and demo_prices_set()
        sign_in = operator_bootstrap()
        self.stdout.write(f"Demo organization 'demo', API key: {secret}")
        if priced:
            self.stdout.write(f"The demo model {DEMO_MODEL} has example prices (see applyconfig).")
        if base_url:
            self.stdout.write(usage(base_url.rstrip("/"), secret, sign_in))
        elif sign_in is not None:
            self.stdout.write(f"Dashboard sign-in: {sign_in.username}, password {sign_in.password}")


def usage(base_url: str, secret: str, sign_in: SignIn | None = None) -> str:
    """The lines `make serve` prints before serving: where, how to sign in to the dashboard,
    and a first request to paste."""
    dashboard = f"{base_url}/dashboard/"
    if sign_in is not None:
        dashboard += f", sign in as {sign_in.username} with password {sign_in.password}"
    return (
        f"Mortar will serve on {base_url} (the dashboard: {dashboard}). Try it:\n"
        f"  export MORTAR_URL={base_url} MORTAR_API_KEY={secret}\n"
        '  curl "$MORTAR_URL/v1/chat/completions" -H "Authorization: Bearer $MORTAR_API_KEY" \\\n'
        "    -H 'Content-Type: application/json' \\\n"
        f"    -d '{FIRST_REQUEST}'"
    )
