import sys

from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.http import HttpRequest, HttpResponse
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from core.errors import BackendUnavailable, MortarError, RouteNotFound
from core.http.responses import error_response
from dashboard.views.assets import favicon
from dashboard.views.unavailable import outage_page, unavailable_backend
from gateway.health import healthz, readyz
from telemetry.scrape import metrics_scrape

urlpatterns = [
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics_scrape),
    path("favicon.ico", favicon),
    # Organizations and keys moved from the gateway app to accounts: old admin links still work.
    re_path(
        r"^admin/gateway/(?P<rest>(?:organization|apikey)/.*)$",
        RedirectView.as_view(url="/admin/accounts/%(rest)s", query_string=True),
    ),
    path("admin/", admin.site.urls),
    path("dashboard/", include("dashboard.urls")),
    # The admin's CSS and JS, straight from the installed apps (no collectstatic step); a
    # reverse proxy in front may serve /static/ itself.
    re_path(r"^static/(?P<path>.*)$", serve_static, {"insecure": True}),
]


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(RouteNotFound(f"There is no route {request.method} {request.path}."))


def server_error(request: HttpRequest) -> HttpResponse:
    # Called while Django handles the exception: an outage is a 503 that says so, not a 500.
    backend = unavailable_backend(sys.exception())
    if backend is None:
        return error_response(MortarError("Mortar failed to handle the request."))
    if request.path.startswith(("/dashboard/", "/admin/")):
        return outage_page(backend)
    return error_response(
        BackendUnavailable(f"Mortar cannot reach {backend} right now; try again shortly.")
    )


handler404 = not_found
handler500 = server_error
