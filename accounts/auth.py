"""Authenticate API keys: `Authorization: Bearer` or `x-api-key`.

`authenticate()` does the work; `BearerKey` and `HeaderKey` are the ninja auth classes API
operations declare (both accept either header: they exist as two so the OpenAPI document
shows both ways of presenting a key).
"""

from __future__ import annotations

import hashlib
from datetime import UTC
from typing import Any

from django.utils import timezone
from ninja.security.base import AuthBase

from accounts.models import ApiKey
from core.errors import AuthenticationError
from core.http.requests import ApiRequest
from core.lookups import lookup_cache
from core.tracing import step


def key_digest(secret: str) -> str:
    # Keys are long random secrets, so one SHA-256 is enough: nothing to brute-force.
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def presented_key(request: ApiRequest) -> str:
    """The key in `Authorization: Bearer …` or `x-api-key`, or an empty string."""
    authorization = request.headers.get("Authorization", "").strip()
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return request.headers.get("x-api-key", "").strip()


async def authenticate(request: ApiRequest) -> ApiKey:
    """Return the active key presented by the request, or raise `missing_key` / `invalid_key`
    / `expired_key`.

    Keys are cached per worker and dropped everywhere the moment any key changes
    (`lookups.py`), so a revoked key fails on its next request on every worker.
    """
    with step("auth"):
        return await _authenticate(request)


async def _authenticate(request: ApiRequest) -> ApiKey:
    secret = presented_key(request)
    if not secret:
        raise AuthenticationError(
            "No API key was presented. Send `Authorization: Bearer <key>` or `x-api-key`.",
            code="missing_key",
        )
    digest = key_digest(secret)

    def load() -> ApiKey | None:
        return (
            ApiKey.objects.select_related("organization")
            .filter(digest=digest, revoked_at__isnull=True)
            .first()
        )

    key = await lookup_cache().get("key", digest, load)
    if key is None:
        raise AuthenticationError(
            "The API key is not valid or has been revoked.", code="invalid_key"
        )
    # Checked on every request, not when the key is cached: a cached key expires on time.
    if key.expires_at is not None and key.is_expired(timezone.now()):
        expired = key.expires_at.astimezone(UTC)
        raise AuthenticationError(
            f"The API key expired at {expired:%Y-%m-%d %H:%M:%S} UTC.", code="expired_key"
        )
    return key


class _KeyAuth(AuthBase):
    """An operation's key check; its errors are answered in the route's envelope."""

    async def __call__(self, request: Any) -> ApiKey:
        return await authenticate(request)


class BearerKey(_KeyAuth):
    openapi_type = "http"
    openapi_scheme = "bearer"


class HeaderKey(_KeyAuth):
    openapi_type = "apiKey"
    openapi_in = "header"
    openapi_name = "x-api-key"


def api_key_auth() -> list[_KeyAuth]:
    """The `auth=` of an API operation: a Mortar key, sent either way."""
    return [BearerKey(), HeaderKey()]


def key_of(request: Any) -> ApiKey:
    """The key an operation's auth accepted (ninja keeps it on the request as `auth`)."""
    key = getattr(request, "auth", None)
    assert isinstance(key, ApiKey), "the operation declares no key auth"
    return key
