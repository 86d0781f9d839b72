from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from accounts.models import Organization, SpendLimits
from accounts.services import KeyLimits, KeyOperationError, KeyPolicy, key_issue


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


def expiry(value: str) -> datetime:
    """An expiry from the command line: an ISO 8601 date or time, UTC unless it names a zone;
    a date alone is its midnight (UTC)."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(
            f"--expires must be a date or time such as 2027-01-31 or 2027-01-31T18:00Z, "
            f"not {value!r}."
        ) from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if moment <= timezone.now():
        raise CommandError("--expires must be in the future.")
    return moment


def model_list(value: str) -> tuple[str, ...]:
    """`--models a,b`: catalog model ids, each once, in the order given."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise CommandError("--models must name at least one model (a comma-separated list).")
    return tuple(dict.fromkeys(names))


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
        parser.add_argument(
            "--models",
            default=None,
            help="Comma-separated catalog model ids the key may use (default: every model); "
            "any other model is refused with 403 model_not_allowed.",
        )
        parser.add_argument(
            "--expires",
            default=None,
            help="When the key stops working (401 expired_key): an ISO 8601 date or time, "
            "UTC unless it names a zone (default: never).",
        )

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
        models: str | None,
        expires: str | None,
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
        policy = KeyPolicy(
            allowed_models=model_list(models) if models is not None else (),
            expires_at=expiry(expires) if expires is not None else None,
        )
        try:
            issued = key_issue(
                organization=org,
                name=name,
                actor="manage.py createkey",
                limits=limits,
                policy=policy,
                secret=secret,
            )
        except KeyOperationError as exc:
            raise CommandError(str(exc)) from None
        key = issued.key
        # The secret alone on stdout, so scripts can capture it; the rest goes to stderr.
        self.stderr.write(f"Created key {key.prefix}… for {org.name!r}; store it now.")
        self.stdout.write(issued.secret)
