"""Sign-in throttling's pieces for django-axes: the client's address it counts failures by
(`AXES_CLIENT_IP_CALLABLE`), and the page a locked-out sign-in gets (`AXES_LOCKOUT_CALLABLE`):
the sign-in page, saying why and for how long, with 429."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.http.forwarding import client_address


def client_ip(request: HttpRequest) -> str | None:
    """The address failures are counted for: the connection's, or the one the trusted proxies
    (`MORTAR_TRUSTED_PROXIES`) forwarded for. Whatever else `X-Forwarded-For` says is ignored:
    a client that could name its own address could sign in past its lockout."""
    return client_address(
        request.META.get("REMOTE_ADDR"),
        request.META.get("HTTP_X_FORWARDED_FOR", ""),
        settings.TRUSTED_PROXIES,
    )


def locked_out(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    # axes passes (request, response, credentials), or (request, credentials) from its async
    # middleware: neither is needed here, the username is the form's.
    return render(
        request,
        "dashboard/login_locked.html",
        {
            "username": request.POST.get("username", ""),
            "failure_limit": settings.AXES_FAILURE_LIMIT,
            "minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60),
        },
        status=settings.AXES_HTTP_RESPONSE_CODE,
    )
