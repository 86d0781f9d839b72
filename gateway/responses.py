"""Render Mortar's responses: the error envelope, and the headers every completion carries."""

from __future__ import annotations

import orjson
from django.http import HttpResponse

from gateway.errors import MortarError


def error_response(error: MortarError, headers: dict[str, str] | None = None) -> HttpResponse:
    """The OpenAI envelope: {"error": {"message", "type", "param", "code"}}."""
    return HttpResponse(
        orjson.dumps(error.envelope()),
        status=error.status,
        content_type="application/json",
        headers=headers,
    )


def json_response(data: object, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(data), status=status, content_type="application/json")
