"""The dashboard's websocket routes (channels routes them with Django's URL patterns)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.urls import path

from dashboard.consumers import TelemetryConsumer

if TYPE_CHECKING:
    from channels.routing import _ExtendedURLPattern


def websocket_path(route: str, consumer: Any) -> _ExtendedURLPattern:
    # Django's `path()` is typed for views; channels accepts an ASGI app in the view's place.
    return cast("_ExtendedURLPattern", path(route, consumer))


websocket_urlpatterns = [
    websocket_path("ws/telemetry/", TelemetryConsumer.as_asgi()),
]
