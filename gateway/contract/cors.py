"""The headers a browser page may send to the API and read from its answers (CORS).

The request headers are the ones the API's routes read: the key (`Authorization`, `x-api-key`),
the body's type, resuming a stream (`Last-Event-ID`), dedupe (`Idempotency-Key`), the client's
request id, Anthropic's version headers on the Messages route, and Mortar's attribution and
behaviour headers; those allowed by prefix are Mortar's own and the ones the OpenAI and
Anthropic SDKs add about themselves (`x-stainless-os`, …), which a browser's preflight names one
by one. The response headers are Mortar's, the request ids, `Retry-After` and the rate limits.
"""

from __future__ import annotations

REQUEST_HEADERS = (
    "Authorization",
    "Content-Type",
    "Accept",
    "x-api-key",
    "Last-Event-ID",
    "Idempotency-Key",
    "X-Request-Id",
    "anthropic-version",
    "anthropic-beta",
    "X-Mortar-Optimize",
    "X-Mortar-Tool-Select",
    "X-Mortar-Session",
    "X-Mortar-End-User-Id",
    "X-Mortar-Dedupe",
)
REQUEST_HEADER_PREFIXES = ("x-mortar-", "x-stainless-")
RESPONSE_HEADERS = (
    "X-Request-Id",
    "request-id",
    "X-Mortar-Request-Id",
    "X-Mortar-Run-Id",
    "X-Mortar-Model",
    "X-Mortar-Deployment",
    "X-Mortar-Session",
    "X-Mortar-Optimizer",
    "X-Mortar-Tool-Selector",
    "X-Mortar-Dedupe",
    "X-Mortar-Upstream",
    "Retry-After",
    *(
        f"x-ratelimit-{part}-{unit}"
        for unit in ("requests", "tokens")
        for part in ("limit", "remaining", "reset")
    ),
)
