from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateway.catalog.config_file import ConfigError, config_apply, parse_config


class Command(BaseCommand):
    help = "Create or update organizations, models and deployments from a YAML file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)

    def handle(self, *args: object, file: Path, **options: object) -> None:
        try:
            text = file.read_text()
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc.strerror}") from None
        try:
            changes = config_apply(parse_config(text))
        except ConfigError as exc:
            raise CommandError(f"{file}: {exc}") from None
        for line in changes:
            self.stdout.write(line)
