"""The page a locked-out sign-in gets (django-axes' `AXES_LOCKOUT_CALLABLE`): the sign-in page,
saying why and for how long, with 429."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


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
