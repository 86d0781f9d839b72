"""The request the API's dispatch builds, and the request id every response carries.

`core.http.dispatch` builds an `ApiRequest` straight from the ASGI scope and hands it to the
route's view (a ninja operation). It has what the API's operations read — the method, path,
headers, query and body — and room for what ninja sets on a request (`auth`); the gateway builds
the same for the requests Mortar makes of itself (`gateway.inprocess`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

from django.http import QueryDict

from core.http.envelopes import MORTAR_ENVELOPE, Envelope
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
    limit, with `body_size` counting every byte sent), its headers, query and request id."""

    __slots__ = (
        "_ninja_csrf_exempt",
        "_query",
        "auth",
        "body",
        "body_size",
        "envelope",
        "headers",
        "method",
        "path",
        "query_string",
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
        query_string: bytes = b"",
        envelope: Envelope = MORTAR_ENVELOPE,
    ):
        self.method = method
        self.path = path
        self.body = body
        self.body_size = body_size
        self.headers = headers
        self.request_id = request_id
        self.query_string = query_string
        # The envelope of the route's errors, for the API's exception handlers.
        self.envelope = envelope
        self._query: QueryDict | None = None
        self.auth: Any = None

    @property
    def GET(self) -> QueryDict:
        """The query's parameters, as Django parses them (on first use: most requests have
        none to read)."""
        if self._query is None:
            self._query = QueryDict(self.query_string.decode("utf-8", "replace"))
        return self._query


def request_id_from(headers: Mapping[str, str]) -> str:
    """The client's `X-Request-Id` when it is a sane header value, else a new one."""
    given = (headers.get("X-Request-Id") or "").strip()
    if _CLIENT_REQUEST_ID.fullmatch(given):
        return given
    return f"req_{new_hex_id()}"
