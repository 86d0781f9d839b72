from decimal import Decimal, InvalidOperation

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Organization, SpendLimits
from accounts.services import KeyLimits, KeyOperationError, key_issue


def usd_amount(value: str) -> Decimal:
    """A budget from the command line: a positive amount in USD, to the micro-dollar."""
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise CommandError(f"--budget-usd must be an amount in USD, not {value!r}.") from None
    exponent = amount.as_tuple().exponent
    if not amount.is_finite() or amount <= 0 or (isinstance(exponent, int) and exponent < -6):
        raise CommandError("--budget-usd must be a positive amount, to the micro-dollar at most.")
    return amount


def positive(name: str, value: int | None) -> int | None:
    if value is not None and value <= 0:
        raise CommandError(f"{name} must be a positive number.")
    return value


class Command(BaseCommand):
    help = "Create an API key for an organization and print its secret (shown only once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", help="The organization's name.")
        parser.add_argument("--name", default="", help="A label for the key.")
        parser.add_argument("--secret", default=None, help="Use this secret instead of a new one.")
        parser.add_argument("--budget-usd", default=None, help="The key's budget in USD.")
        parser.add_argument(
            "--budget-period",
            choices=SpendLimits.BudgetPeriod.values,
            default=SpendLimits.BudgetPeriod.MONTH,
            help="What the budget is per: day, month (calendar, UTC) or total.",
        )
        parser.add_argument("--rpm", type=int, default=None, help="Requests per minute.")
        parser.add_argument("--tpm", type=int, default=None, help="Tokens per minute.")

    def handle(
        self,
        *args: object,
        organization: str,
        name: str,
        secret: str | None,
        budget_usd: str | None,
        budget_period: str,
        rpm: int | None,
        tpm: int | None,
        **options: object,
    ) -> None:
        org = Organization.objects.filter(name=organization).first()
        if org is None:
            raise CommandError(f"There is no organization named {organization!r}.")
        budget = usd_amount(budget_usd) if budget_usd is not None else None
        rpm, tpm = positive("--rpm", rpm), positive("--tpm", tpm)
        limits = KeyLimits(
            budget_usd=budget,
            budget_period=budget_period,
            requests_per_minute=rpm,
            tokens_per_minute=tpm,
        )
        try:
            issued = key_issue(
                organization=org,
                name=name,
                actor="manage.py createkey",
                limits=limits,
                secret=secret,
            )
        except KeyOperationError as exc:
            raise CommandError(str(exc)) from None
        key = issued.key
        # The secret alone on stdout, so scripts can capture it; the rest goes to stderr.
        self.stderr.write(f"Created key {key.prefix}… for {org.name!r}; store it now.")
        self.stdout.write(issued.secret)
