"""Authenticate API keys: `Authorization: Bearer` or `x-api-key` (PRODUCT.md decision 8)."""

from __future__ import annotations

import hashlib

from gateway.api_request import AnyRequest
from gateway.errors import AuthenticationError
from gateway.lookups import lookup_cache
from gateway.models import ApiKey


def key_digest(secret: str) -> str:
    # Keys are long random secrets, so one SHA-256 is enough: nothing to brute-force.
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def presented_key(request: AnyRequest) -> str:
    """The key in `Authorization: Bearer …` or `x-api-key`, or an empty string."""
    authorization = request.headers.get("Authorization", "").strip()
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return request.headers.get("x-api-key", "").strip()


async def authenticate(request: AnyRequest) -> ApiKey:
    """Return the active key presented by the request, or raise `missing_key` / `invalid_key`.

    Keys are cached per worker and dropped everywhere the moment any key changes
    (`lookups.py`), so a revoked key fails on its next request on every worker.
    """
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
    return key
