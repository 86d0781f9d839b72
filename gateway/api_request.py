"""The request the chat-completions pipeline reads: its body and headers, nothing more.

`gateway/chat_endpoint.py` builds one straight from the ASGI scope. Django's `HttpRequest`
has the same two attributes, so code that only reads headers (authentication) takes either.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.http import HttpRequest


class RequestHeaders:
    """Header lookup by case-insensitive name; repeated headers joined with "," as Django does."""

    __slots__ = ("_values",)

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]):
        values: dict[str, str] = {}
        for raw_name, raw_value in raw:
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            values[name] = f"{values[name]},{value}" if name in values else value
        self._values = values

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._values.get(name.lower(), default)

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._values


class ApiRequest:
    """One API request: the body as received (cut at `body_size` past the limit) and headers."""

    __slots__ = ("body", "body_size", "headers", "request_id")

    def __init__(self, *, body: bytes, body_size: int, headers: RequestHeaders, request_id: str):
        self.body = body
        self.body_size = body_size  # every byte the client sent, kept or not
        self.headers = headers
        self.request_id = request_id


# What code that reads only headers accepts: the pipeline's request or Django's.
AnyRequest = ApiRequest | HttpRequest
