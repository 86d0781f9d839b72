"""The request Mortar's lean ASGI dispatch builds, and the request id every response carries.

`core.http.asgi` builds an `ApiRequest` straight from the ASGI scope for the hot path and hands
it to the same ninja operation Django's handler would call. It has what that operation and the
pipeline read from Django's `HttpRequest` — the method, path, headers and body — and room for
what ninja sets on a request (`auth`), so code that reads requests takes either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

from django.http import HttpRequest

from core.ids import new_hex_id

_CLIENT_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")


T = TypeVar("T")


class RequestHeaders(Mapping[str, str]):
    """Header lookup by case-insensitive name; repeated headers joined with "," as Django does."""

    __slots__ = ("_values",)

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]):
        values: dict[str, str] = {}
        for raw_name, raw_value in raw:
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            values[name] = f"{values[name]},{value}" if name in values else value
        self._values = values

    @overload
    def get(self, name: str, /) -> str | None: ...
    @overload
    def get(self, name: str, default: T, /) -> str | T: ...
    def get(self, name: str, default: object = None, /) -> object:
        # Mapping.get would go through __getitem__ and a KeyError: this is the hot path.
        return self._values.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class ApiRequest:
    """One API request read straight from ASGI: the body as received (cut one byte past the
    limit, with `body_size` counting every byte sent), its headers and its request id."""

    __slots__ = (
        "GET",
        "_ninja_csrf_exempt",
        "auth",
        "body",
        "body_size",
        "headers",
        "method",
        "path",
        "request_id",
    )

    def __init__(
        self,
        *,
        method: str,
        path: str,
        body: bytes,
        body_size: int,
        headers: RequestHeaders,
        request_id: str,
    ):
        self.method = method
        self.path = path
        self.body = body
        self.body_size = body_size
        self.headers = headers
        self.request_id = request_id
        self.GET: Mapping[str, str] = {}
        self.auth: Any = None


# What code that reads requests accepts: the lean dispatch's or Django's.
AnyRequest = ApiRequest | HttpRequest


def request_id_from(headers: Mapping[str, str]) -> str:
    """The client's `X-Request-Id` when it is a sane header value, else a new one."""
    given = (headers.get("X-Request-Id") or "").strip()
    if _CLIENT_REQUEST_ID.fullmatch(given):
        return given
    return f"req_{new_hex_id()}"


# Where `RequestIdMiddleware` keeps the id on Django's request (an `ApiRequest` has the slot).
REQUEST_ID_ATTRIBUTE = "request_id"


def request_id_of(request: AnyRequest) -> str:
    """The id the request was given on arrival (by the dispatch or `RequestIdMiddleware`)."""
    found = getattr(request, REQUEST_ID_ATTRIBUTE, None)
    return found if isinstance(found, str) else request_id_from(request.headers)


def body_of(request: AnyRequest) -> tuple[bytes, int]:
    """The body as kept, and how many bytes the client sent."""
    if isinstance(request, ApiRequest):
        return request.body, request.body_size
    body = request.body
    return body, len(body)
