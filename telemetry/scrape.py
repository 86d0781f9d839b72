"""`GET /metrics`: this server's metrics, every worker process's together, in Prometheus' text
format; with `MORTAR_METRICS_TOKEN` set, only for a request bearing it."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from telemetry.metrics import metrics


def scrape_allowed(request: HttpRequest) -> bool:
    token = settings.MORTAR_METRICS_TOKEN
    if not token:
        return True
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    )


@require_GET
def metrics_scrape(request: HttpRequest) -> HttpResponse:
    """The metrics of every worker process of this server, summed as their kinds want."""
    if not scrape_allowed(request):
        return HttpResponse(
            "A Bearer token is required (MORTAR_METRICS_TOKEN).\n",
            status=401,
            content_type="text/plain; charset=utf-8",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    metrics()  # the metrics directory is chosen, and this process's metrics exist
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
