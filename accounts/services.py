"""Writes for organizations and API keys."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from accounts.auth import key_digest
from accounts.models import ApiKey, KeyChange, Membership, Organization, SpendLimits

KEY_PREFIX = "mk-"
VISIBLE_PREFIX_CHARS = 11
MIN_SECRET_CHARS = 16
DEMO_ORGANIZATION = "demo"
DEMO_KEY_NAME = "demo"


class KeyOperationError(ValueError):
    """A key operation that cannot be done as asked (bad secret, unknown or ambiguous prefix)."""


@dataclass(frozen=True)
class IssuedKey:
    key: ApiKey
    secret: str  # shown once, never stored


@dataclass(frozen=True)
class KeyLimits:
    """A key's budget and rate limits; None is no limit (the organization's still apply)."""

    budget_usd: Decimal | None = None
    budget_period: str = SpendLimits.BudgetPeriod.MONTH
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None


@dataclass(frozen=True)
class KeyPolicy:
    """What a key may do besides spending: the catalog models it may use (empty: every model)
    and when it stops working (None: never)."""

    allowed_models: tuple[str, ...] = ()
    expires_at: datetime | None = None


class OrganizationExists(ValueError):
    pass


class MembershipError(ValueError):
    """A role that cannot be given or taken as asked (unknown user or organization)."""


def _member_and_organization(username: str, organization_name: str) -> tuple[User, Organization]:
    user = User.objects.filter(username=username).first()
    if user is None:
        raise MembershipError(f"There is no user named {username!r}.")
    organization = Organization.objects.filter(name=organization_name).first()
    if organization is None:
        raise MembershipError(f"There is no organization named {organization_name!r}.")
    return user, organization


@transaction.atomic
def membership_set(*, username: str, organization_name: str, role: str) -> Membership:
    """Give the user this role in the organization (replacing the one they had there)."""
    user, organization = _member_and_organization(username, organization_name)
    membership, _ = Membership.objects.update_or_create(
        user=user, organization=organization, defaults={"role": role}
    )
    return membership


@transaction.atomic
def membership_remove(*, username: str, organization_name: str) -> None:
    """Take away the user's role in the organization; they no longer see it on the dashboard."""
    user, organization = _member_and_organization(username, organization_name)
    deleted, _ = Membership.objects.filter(user=user, organization=organization).delete()
    if not deleted:
        raise MembershipError(f"{username} has no role in {organization_name!r}.")


@transaction.atomic
def organization_create(*, name: str, finish_chunk_delta: bool = False) -> Organization:
    name = name.strip()
    if not name:
        raise ValueError("An organization needs a name.")
    if Organization.objects.filter(name=name).exists():
        raise OrganizationExists(f"An organization named {name!r} already exists.")
    return Organization.objects.create(name=name, finish_chunk_delta=finish_chunk_delta)


def organization_set_finish_chunk_delta(*, organization_id: int, on: bool) -> Organization:
    """Turn OpenAI's exact reply shape on or off for the organization, from its next request
    (saved, so every worker's cached lookup of it is forgotten)."""
    organization = Organization.objects.get(pk=organization_id)
    organization.finish_chunk_delta = on
    organization.save(update_fields=["finish_chunk_delta"])
    return organization


def key_create(
    *,
    organization: Organization,
    name: str = "",
    secret: str | None = None,
    limits: KeyLimits | None = None,
    policy: KeyPolicy | None = None,
) -> IssuedKey:
    if secret is None:
        secret = KEY_PREFIX + secrets.token_hex(24)
    elif len(secret) < MIN_SECRET_CHARS or not secret.isprintable() or " " in secret:
        raise KeyOperationError(
            f"A key's secret must be at least {MIN_SECRET_CHARS} printable characters "
            "without spaces."
        )
    digest = key_digest(secret)
    if ApiKey.objects.filter(digest=digest).exists():
        raise KeyOperationError("That secret is already in use by another key.")
    limits, policy = limits or KeyLimits(), policy or KeyPolicy()
    key = ApiKey.objects.create(
        organization=organization,
        name=name,
        prefix=secret[:VISIBLE_PREFIX_CHARS],
        digest=digest,
        budget_usd=limits.budget_usd,
        budget_period=limits.budget_period,
        requests_per_minute=limits.requests_per_minute,
        tokens_per_minute=limits.tokens_per_minute,
        allowed_models=list(policy.allowed_models),
        expires_at=policy.expires_at,
    )
    return IssuedKey(key=key, secret=secret)


# Changes made by someone (the dashboard's Keys page): each is written with its audit entry in
# one transaction; every worker is told to drop its cached keys once it has committed (the
# models' `post_save`, `core/lookups.py`).


# Who made a change: a staff user, or the command that did (`manage.py createkey`).
Actor = User | str


def _audited(key: ApiKey, action: str, actor: Actor, detail: str) -> None:
    KeyChange.objects.create(
        key=key,
        action=action,
        actor=None if isinstance(actor, str) else actor,
        actor_name=actor if isinstance(actor, str) else actor.get_username(),
        detail=detail,
        at=timezone.now(),
    )


@transaction.atomic
def key_issue(
    *,
    organization: Organization,
    name: str,
    actor: Actor,
    limits: KeyLimits | None = None,
    policy: KeyPolicy | None = None,
    secret: str | None = None,
) -> IssuedKey:
    """Create a key and record who did; the secret is returned once, never stored."""
    issued = key_create(
        organization=organization, name=name.strip(), secret=secret, limits=limits, policy=policy
    )
    detail = ", ".join(filter(None, [_limits_text(issued.key), _policy_text(issued.key)]))
    _audited(issued.key, KeyChange.Action.CREATED, actor, detail)
    return issued


@transaction.atomic
def key_policy_set(*, key_id: int, policy: KeyPolicy, actor: Actor) -> bool:
    """Give the key this policy; record the change, if it is one. Return whether it was."""
    key = ApiKey.objects.select_for_update().get(pk=key_id)
    allowed = list(policy.allowed_models)
    if key.allowed_models == allowed and key.expires_at == policy.expires_at:
        return False
    key.allowed_models, key.expires_at = allowed, policy.expires_at
    key.save(update_fields=["allowed_models", "expires_at"])
    _audited(key, KeyChange.Action.CHANGED, actor, _policy_text(key) or "every model, no expiry")
    return True


@transaction.atomic
def key_rename(*, key_id: int, name: str, actor: Actor) -> ApiKey:
    """Give the key a new name (its label only: the secret and its limits stay)."""
    key = ApiKey.objects.select_for_update().get(pk=key_id)
    name = name.strip()
    if name == key.name:
        return key
    old, key.name = key.name, name
    key.save(update_fields=["name"])
    _audited(key, KeyChange.Action.RENAMED, actor, f"{old or '(unnamed)'} → {name or '(unnamed)'}")
    return key


@transaction.atomic
def key_revoke_by_id(*, key_id: int, actor: Actor) -> ApiKey:
    """Revoke the key: its next request fails with 401 `invalid_key` on every worker."""
    key = ApiKey.objects.select_for_update().get(pk=key_id)
    if key.revoked_at is not None:
        raise KeyOperationError(f"The key {key.prefix}… was already revoked.")
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    _audited(key, KeyChange.Action.REVOKED, actor, "")
    return key


@transaction.atomic
def key_change_record(*, key: ApiKey, actor: User, changed: list[str]) -> None:
    """Audit a change made to the key elsewhere (the admin's form): which fields, by whom."""
    if not changed:
        return
    action = KeyChange.Action.CHANGED
    if changed == ["revoked_at"]:
        action = KeyChange.Action.REVOKED if key.revoked_at else KeyChange.Action.CHANGED
    elif changed == ["name"]:
        action = KeyChange.Action.RENAMED
    _audited(key, action, actor, "in the admin: " + ", ".join(changed))


def _limits_text(key: ApiKey) -> str:
    parts = []
    if key.budget_usd is not None:
        parts.append(f"budget ${Decimal(key.budget_usd).normalize():f} per {key.budget_period}")
    if key.requests_per_minute is not None:
        parts.append(f"{key.requests_per_minute} requests/min")
    if key.tokens_per_minute is not None:
        parts.append(f"{key.tokens_per_minute} tokens/min")
    return ", ".join(parts) or "no limits of its own"


def _policy_text(key: ApiKey) -> str:
    parts = []
    if key.allowed_models:
        parts.append("models " + ", ".join(key.allowed_models))
    if key.expires_at is not None:
        parts.append(f"expires {key.expires_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC")
    return ", ".join(parts)


def key_by_prefix(prefix: str) -> ApiKey:
    """The one active key whose visible prefix starts with `prefix`."""
    matches = list(ApiKey.objects.filter(prefix__startswith=prefix, revoked_at__isnull=True)[:2])
    if not prefix or not matches:
        raise KeyOperationError(f"No active key has the prefix {prefix!r}.")
    if len(matches) > 1:
        raise KeyOperationError(
            f"More than one active key has the prefix {prefix!r}; give more of it."
        )
    return matches[0]


def key_revoke(*, prefix: str, actor: Actor = "manage.py revokekey") -> ApiKey:
    """Revoke the one active key whose visible prefix starts with `prefix`."""
    return key_revoke_by_id(key_id=key_by_prefix(prefix).pk, actor=actor)


@transaction.atomic
def demo_bootstrap(*, secret: str | None = None) -> tuple[Organization, str]:
    """Make sure the demo organization has a usable key; return it with the key's secret.

    Secrets are only stored hashed, so the demo secret Mortar generated is kept in
    `var/demo-key` (mode 0600) to print it again on the next `make serve`.
    """
    organization, _ = Organization.objects.get_or_create(name=DEMO_ORGANIZATION)
    if secret:
        existing = ApiKey.objects.filter(digest=key_digest(secret)).first()
        if existing is not None:
            if existing.organization_id != organization.id:
                raise KeyOperationError("MORTAR_BOOTSTRAP_KEY belongs to another organization.")
            if existing.revoked_at is not None:
                existing.revoked_at = None
                existing.save(update_fields=["revoked_at"])
            return organization, secret
        return organization, key_create(
            organization=organization, name=DEMO_KEY_NAME, secret=secret
        ).secret

    saved = _demo_key_file()
    if saved.exists():
        secret = saved.read_text().strip()
        if ApiKey.objects.filter(digest=key_digest(secret), revoked_at__isnull=True).exists():
            return organization, secret
    issued = key_create(organization=organization, name=DEMO_KEY_NAME)
    saved.write_text(issued.secret + "\n")
    saved.chmod(0o600)
    return organization, issued.secret


def _demo_key_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-key"


OPERATOR_USERNAME = "admin"


@dataclass(frozen=True)
class SignIn:
    """The dashboard's first sign-in, as `make serve` prints it."""

    username: str
    password: str


@transaction.atomic
def operator_bootstrap() -> SignIn | None:
    """Make sure the dashboard can be signed in to; return the generated sign-in, if any.

    On a database with no staff account yet, a superuser `admin` is made with a generated
    password, kept (like the demo key) in `var/dashboard-password`, mode 0600, to print it
    again on the next `make serve`. Nothing is returned, and nothing changed, once the
    operators have accounts of their own or have changed that password.
    """
    saved = _operator_password_file()
    user = User.objects.filter(username=OPERATOR_USERNAME).first()
    if user is None:
        if User.objects.filter(is_staff=True).exists():
            return None
        password = secrets.token_urlsafe(18)
        User.objects.create_superuser(username=OPERATOR_USERNAME, email="", password=password)
        _write_private(saved, password + "\n")
        return SignIn(username=OPERATOR_USERNAME, password=password)
    if not saved.exists():
        return None
    password = saved.read_text().strip()
    if user.is_active and user.is_staff and user.check_password(password):
        return SignIn(username=OPERATOR_USERNAME, password=password)
    return None


def _operator_password_file() -> Path:
    return Path(settings.VAR_DIR) / "dashboard-password"


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by this user only from the first byte."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    path.chmod(0o600)  # an existing file keeps its mode through os.open
