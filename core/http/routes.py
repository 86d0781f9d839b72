"""The API's routes, each with the error envelope its router declares.

A router declares its envelope once, where its routes are declared (`ApiRouter(envelope=…)`),
and the API's assembly mounts it under a prefix (`Mount`). From those the dispatch learns, for
each of the API's URL patterns, the envelope its errors are written in (`api_routes`), and for a
path no pattern matches, the envelope of the router whose prefix it is under (`prefix_envelopes`:
a wrong sub-path of a route is answered in that route's dialect).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.urls import URLPattern
from ninja import Router
from ninja.utils import normalize_path, replace_path_param_notation

from core.http.envelopes import MORTAR_ENVELOPE, Envelope


class ApiRouter(Router):
    """A ninja router whose routes answer every error in one envelope (Mortar's by default)."""

    def __init__(self, *, envelope: Envelope = MORTAR_ENVELOPE, **options: Any) -> None:
        super().__init__(**options)
        self.envelope = envelope


@dataclass(frozen=True)
class Mount:
    """A router as the API mounts it: under `prefix`, relative to the API's own."""

    prefix: str
    router: ApiRouter


@dataclass(frozen=True)
class ApiRoute:
    """One of the API's URL patterns (relative to its prefix), and its errors' envelope."""

    pattern: URLPattern
    envelope: Envelope


def route_of(prefix: str, path: str) -> str:
    """The route (Django's `path()` syntax) ninja gives an operation at `path` of a router
    mounted at `prefix`."""
    joined = "/".join(part for part in map(replace_path_param_notation, (prefix, path)) if part)
    return normalize_path(joined).lstrip("/")


def api_routes(
    patterns: Sequence[URLPattern], mounts: Sequence[Mount], default: Envelope
) -> list[ApiRoute]:
    """Each pattern with its router's envelope; a pattern of no router's (the API's document,
    its docs page) answers in `default`."""
    envelopes: dict[str, Envelope] = {}
    for mount in mounts:
        for path in mount.router.path_operations:
            route = route_of(mount.prefix, path)
            if envelopes.setdefault(route, mount.router.envelope) is not mount.router.envelope:
                raise ImproperlyConfigured(f"Two routers with different envelopes serve {route}.")
    return [ApiRoute(pattern, envelopes.get(str(pattern.pattern), default)) for pattern in patterns]


def prefix_envelopes(mounts: Sequence[Mount]) -> dict[str, Envelope]:
    """The envelope of each router mounted under a prefix of its own (not the API's root)."""
    return {
        route_of(mount.prefix, ""): mount.router.envelope
        for mount in mounts
        if route_of(mount.prefix, "")
    }
