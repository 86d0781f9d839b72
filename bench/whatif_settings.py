"""Mortar's settings with only Mortar's own middleware, for `bench/whatif.py` only.

Measures what the /v1/ hot path would gain if Django's sync-only middleware (sessions, CSRF,
auth, messages, security, common, clickjacking: 13 `sync_to_async` thread hops per request)
stayed on the admin and dashboard routes only.
"""

from config.settings import *  # noqa: F403

MIDDLEWARE = [
    "gateway.middleware.RequestIdMiddleware",
    "gateway.middleware.JsonErrorMiddleware",
]
