"""`GET /metrics`: this server's metrics, every worker process's together, in Prometheus' text
format; with `MORTAR_METRICS_TOKEN` set, only for a request bearing it, and without it only for
a client on this machine (loopback), so a server reachable from elsewhere does not show its
traffic, models and organizations to anyone who asks."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from telemetry.metrics import expose_known_labels

# A request carrying these came through a proxy: the client is not the loopback peer.
FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")


def from_loopback(request: HttpRequest) -> bool:
    """Whether the client is on this machine, not a proxy forwarding someone else."""
    if any(name in request.headers for name in FORWARDING_HEADERS):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR") or "").is_loopback
    except ValueError:
        return False


def scrape_allowed(request: HttpRequest) -> bool:
    token = settings.MORTAR_METRICS_TOKEN
    if not token:
        return from_loopback(request)
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    )


@require_GET
def metrics_scrape(request: HttpRequest) -> HttpResponse:
    """The metrics of every worker process of this server, summed as their kinds want."""
    if not scrape_allowed(request):
        if not settings.MORTAR_METRICS_TOKEN:
            return HttpResponse(
                "Without MORTAR_METRICS_TOKEN, /metrics answers only clients on this machine.\n",
                status=403,
                content_type="text/plain; charset=utf-8",
            )
        return HttpResponse(
            "A Bearer token is required (MORTAR_METRICS_TOKEN).\n",
            status=401,
            content_type="text/plain; charset=utf-8",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    # The metrics directory is chosen, this process's metrics exist, and the series Mortar
    # knows of are there at 0 (models and deployments added since the last scrape included).
    expose_known_labels()
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
