"""One log line per request (a run, closed), for `MORTAR_LOG_FORMAT=json`.

What it says: the run and request ids, the organization, route, model, status, duration,
first token and usage. Never a key, a prompt or a reply (the run store holds those, under the
organization's retention). Off in the plain format: a line per request costs the hot path CPU
that `make serve`'s default spends elsewhere (its access log is off for the same reason).
"""

from __future__ import annotations

import logging

from django.conf import settings

from telemetry.store.fields import RunFields

logger = logging.getLogger("mortar.requests")


def request_logged(
    run: RunFields,
    *,
    route: str,
    organization: str,
    seconds: float,
    first_token_seconds: float | None,
) -> None:
    """Log the closed run as the request's line, when the log format is JSON."""
    if settings.MORTAR_LOG_FORMAT != "json":
        return
    cost = run.get("cost")
    logger.info(
        "request",
        extra={
            "fields": {
                "run_id": run.get("id"),
                "request_id": run.get("request_id", ""),
                "organization": organization,
                "organization_id": run.get("organization_id"),
                "route": route,
                "model": run.get("model", ""),
                "deployment": run.get("deployment", ""),
                "stream": run.get("stream"),
                "status": run.get("status"),
                "http_status": run.get("http_status"),
                "error_code": run.get("error_code", ""),
                "duration_ms": round(seconds * 1000, 2),
                "ttft_ms": None
                if first_token_seconds is None
                else round(first_token_seconds * 1000, 2),
                "prompt_tokens": run.get("prompt_tokens"),
                "completion_tokens": run.get("completion_tokens"),
                "cached_tokens": run.get("cached_tokens"),
                "usage_source": run.get("usage_source", ""),
                "cost_usd": None if cost is None else str(cost),
            }
        },
    )
