"""Organizations and their API keys: who a request belongs to.

The tables keep the names they had when these models lived in the gateway app
(`gateway_organization`, `gateway_apikey`): the move was a state-only migration.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

# The bounds of what operators set, checked wherever they set it (the admin's forms, the
# dashboard's keys page, `applyconfig`): what the columns hold.
BUDGET_USD_MIN = Decimal("0.000001")
BUDGET_USD_MAX = Decimal("99999999.999999")  # numeric(14, 6)
PER_MINUTE_MAX = 2_147_483_647  # the integer column's
RETENTION_DAYS_MAX = 36_500  # a century: the purge's cutoff must be a date

_per_minute_bounds = [MinValueValidator(1), MaxValueValidator(PER_MINUTE_MAX)]


def budget_bounds(table: str) -> models.CheckConstraint:
    """SQLite stores any number in a decimal column, and a budget its column cannot hold would
    make every read of its row fail: refused by the database too (a budget of nothing, which
    refuses every priced request, is one it can hold)."""
    return models.CheckConstraint(
        condition=models.Q(budget_usd__isnull=True)
        | models.Q(budget_usd__gte=0, budget_usd__lte=BUDGET_USD_MAX),
        name=f"{table}_budget_usd_bounds",
    )


class SpendLimits(models.Model):
    """What an organization or a key may spend: a budget in USD per period, and rate
    limits per minute. Empty means no limit; a request must fit its organization's and its key's."""

    class BudgetPeriod(models.TextChoices):
        DAY = "day", "Day (UTC)"
        MONTH = "month", "Calendar month (UTC)"
        TOTAL = "total", "Total (never resets)"

    budget_usd = models.DecimalField(
        "budget (USD)",
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        validators=[MinValueValidator(BUDGET_USD_MIN), MaxValueValidator(BUDGET_USD_MAX)],
    )
    budget_period = models.CharField(
        max_length=8, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTH
    )
    requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=_per_minute_bounds
    )
    tokens_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=_per_minute_bounds
    )

    class Meta:
        abstract = True


class Organization(SpendLimits):
    class Retention(models.TextChoices):
        FULL = "full", "Full (prompts, replies, replay)"
        METADATA = "metadata", "Metadata only (no prompt or reply text; no replay)"

    class OptimizeDefault(models.TextChoices):
        ON = "on", "On (lossless passes)"
        OFF = "off", "Off"

    name = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Retention is per organization: each decides how long its runs are kept and with what.
    retention = models.CharField(max_length=16, choices=Retention.choices, default=Retention.FULL)
    retention_days = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(RETENTION_DAYS_MAX)]
    )
    # What the prompt optimizer does for requests without `X-Mortar-Optimize`.
    optimize_default = models.CharField(
        max_length=8, choices=OptimizeDefault.choices, default=OptimizeDefault.ON
    )
    # The finish chunk of a streamed chat completion has no `delta` (the contract); clients
    # that read `chunk.choices[0].delta.content` on every chunk (OpenAI's own docs loop) fail
    # on it. Opting in adds `"delta": {}` to that chunk, stored and replayed as sent.
    finish_chunk_delta = models.BooleanField(
        default=False,
        help_text='Add "delta": {} to the finish chunk of streamed chat completions, for SDK '
        "loops that read delta on every chunk. Off: the contract's finish chunk, no delta.",
    )

    class Meta:
        db_table = "gateway_organization"
        constraints = [budget_bounds("gateway_organization")]

    def __str__(self) -> str:
        return self.name


class ApiKey(SpendLimits):
    """An API key: only its SHA-256 digest is stored; the secret is shown once at creation."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=200, blank=True, default="")
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The key's policy. A key limited to some models is refused any other (403
    # `model_not_allowed`); an empty list is every model. A key past its expiry is refused
    # (401 `expired_key`) like a revoked one, and stays listed as expired.
    allowed_models = models.JSONField(
        default=list,
        blank=True,
        help_text="Catalog model ids this key may use; empty: every model.",
    )
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="When the key stops working; empty: never."
    )

    class Meta:
        db_table = "gateway_apikey"
        constraints = [budget_bounds("gateway_apikey")]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def allows_model(self, model_id: str) -> bool:
        return not self.allowed_models or model_id in self.allowed_models


class KeyChange(models.Model):
    """One change to an API key made by someone: who, when, what. Never the secret.

    The actor's name is copied, so the entry still says who after the account is deleted.
    """

    class Action(models.TextChoices):
        CREATED = "created"
        RENAMED = "renamed"
        REVOKED = "revoked"
        CHANGED = "changed"  # its budget, rate limits or policy (the admin, applyconfig)

    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="changes")
    action = models.CharField(max_length=16, choices=Action.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_name = models.CharField(max_length=150)  # who, or the command line's name
    detail = models.CharField(max_length=500, default="", blank=True)
    at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.key_id} at {self.at:%Y-%m-%d %H:%M:%S}"


class Membership(models.Model):
    """A dashboard user's role in one organization; staff need none (they see everything).

    A viewer sees the organization's runs, sessions, replays, Live and spend; an admin also
    manages its keys and budgets. Nothing of any other organization is shown to either.
    """

    class Role(models.TextChoices):
        VIEWER = "viewer", "Viewer (runs, sessions, replay, Live, spend)"
        ADMIN = "admin", "Admin (also keys and budgets)"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "organization"], name="one_role_per_org")
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.organization}"
