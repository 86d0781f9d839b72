"""The dashboard's static files."""

from __future__ import annotations

import mimetypes

from django.contrib.staticfiles import finders
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
)
from django.views.decorators.http import require_GET

FAVICON = "dashboard/favicon.svg"


@require_GET
def asset(request: HttpRequest, path: str) -> FileResponse:
    """The dashboard's own and vendored static files (the ASGI server serves no /static/)."""
    if not path.startswith("dashboard/") or ".." in path:
        raise Http404(path)
    found = finders.find(path)
    if not found:
        raise Http404(path)
    content_type = mimetypes.guess_type(str(found))[0] or "application/octet-stream"
    response = FileResponse(open(found, "rb"), content_type=content_type)  # noqa: SIM115
    response["Cache-Control"] = "public, max-age=3600"
    return response


@require_GET
def favicon(request: HttpRequest) -> FileResponse:
    """`/favicon.ico`, which browsers ask for on every page that names no icon (the admin's)."""
    return asset(request, FAVICON)
