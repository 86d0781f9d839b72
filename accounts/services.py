"""Writes for organizations and API keys."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.auth import key_digest
from accounts.models import ApiKey, Organization

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


class OrganizationExists(ValueError):
    pass


@transaction.atomic
def organization_create(*, name: str) -> Organization:
    name = name.strip()
    if not name:
        raise ValueError("An organization needs a name.")
    if Organization.objects.filter(name=name).exists():
        raise OrganizationExists(f"An organization named {name!r} already exists.")
    return Organization.objects.create(name=name)


def key_create(
    *, organization: Organization, name: str = "", secret: str | None = None
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
    key = ApiKey.objects.create(
        organization=organization,
        name=name,
        prefix=secret[:VISIBLE_PREFIX_CHARS],
        digest=digest,
    )
    return IssuedKey(key=key, secret=secret)


def key_revoke(*, prefix: str) -> ApiKey:
    """Revoke the one active key whose visible prefix starts with `prefix`."""
    matches = list(ApiKey.objects.filter(prefix__startswith=prefix, revoked_at__isnull=True)[:2])
    if not prefix or not matches:
        raise KeyOperationError(f"No active key has the prefix {prefix!r}.")
    if len(matches) > 1:
        raise KeyOperationError(
            f"More than one active key has the prefix {prefix!r}; give more of it."
        )
    key = matches[0]
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    return key


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
