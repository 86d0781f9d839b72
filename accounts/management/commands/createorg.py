from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError

from accounts.services import organization_create


class Command(BaseCommand):
    help = "Create an organization."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--finish-chunk-delta",
            action="store_true",
            help='Answer in the exact shape of OpenAI\'s published schema: "delta": {} on the '
            "finish chunk of a stream, refusal: null on the reply's message (off by default).",
        )

    def handle(self, *args: object, name: str, finish_chunk_delta: bool, **options: object) -> None:
        try:
            organization = organization_create(name=name, finish_chunk_delta=finish_chunk_delta)
        except (ValueError, IntegrityError) as exc:
            raise CommandError(f"Could not create the organization: {exc}") from None
        shape = " (finish_chunk_delta on)" if organization.finish_chunk_delta else ""
        self.stdout.write(
            f"Created organization {organization.name!r} (id {organization.id}){shape}."
        )
