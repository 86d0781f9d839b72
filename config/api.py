"""The API under /v1/: every app's ninja router, mounted, with one way to render errors.

The API is not in Django's URLconf: `config.asgi` serves every path under `API_PREFIX` through
the API's own dispatch (`core.http.dispatch`), built by `api_dispatch()` from the routers
mounted here. Each router declares its error envelope; the dispatch puts the route's on the
request, and the exception handlers below answer in it.

/v1/openapi.json describes every operation from its declared schemas; /v1/docs is Swagger UI on
it, served from ninja's bundled assets (`ninja` is an installed app), so it works offline.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern
from ninja import NinjaAPI, Swagger
from ninja.errors import AuthenticationError as NinjaAuthenticationError
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.openapi.schema import OpenAPISchema

from core.errors import (
    AuthenticationError,
    BackendUnavailable,
    InvalidRequest,
    MortarError,
    error_for_status,
)
from core.http.dispatch import ApiDispatch
from core.http.envelopes import MORTAR_ENVELOPE
from core.http.openapi import add_components
from core.http.requests import ApiRequest
from core.http.responses import DeferredResponse, error_response
from core.http.routes import ApiRouter, Mount, api_routes, prefix_envelopes
from gateway.api import router as gateway_router
from gateway.surfaces import surfaces_load
from mortar import __version__
from replay.api import router as replay_router
from telemetry.api import router as telemetry_router

logger = logging.getLogger(__name__)

API_PREFIX = "/v1/"


class MortarApi(NinjaAPI):
    """The NinjaAPI whose routers declare their envelopes, whose document also holds the schemas
    operations name in `openapi_extra`, and whose operations' temporal responses are built only
    when used."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.mounts: list[Mount] = []

    def mount(self, prefix: str, router: ApiRouter) -> None:
        """Add `router` under `prefix`, and remember it for the dispatch."""
        self.add_router(prefix, router)
        self.mounts.append(Mount(prefix, router))

    def get_root_path(self, path_params: dict[str, Any]) -> str:
        # ninja reverses its root in Django's URLconf; the API is mounted outside it.
        return API_PREFIX

    def create_temporal_response(self, request: HttpRequest) -> HttpResponse:
        return DeferredResponse(self.get_content_type())

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> OpenAPISchema:
        document = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        document.update(add_components(document))
        return document


class MortarSwagger(Swagger):
    """Swagger UI on the API's document, found under the API's prefix (not reversed)."""

    def get_openapi_url(self, api: NinjaAPI, path_params: dict[str, Any]) -> str:
        return API_PREFIX + (api.openapi_url or "").lstrip("/")


api = MortarApi(
    title="Mortar",
    # The release this server runs (the API's own version is its prefix, /v1/).
    version=__version__,
    description="A self-hosted, OpenAI-compatible LLM gateway with a complete audit trail.",
    urls_namespace="v1",
    docs_url="/docs",
    # No validator badge fetched from swagger.io: the docs work offline.
    docs=MortarSwagger(settings={"validatorUrl": None}),
)
for loaded in surfaces_load():
    # Each surface's routes under its own path: an unknown sub-path of it answers in its
    # envelope.
    if not loaded.surface.path.startswith(API_PREFIX):
        raise ImproperlyConfigured(f"The surface {loaded.surface.name} is not under {API_PREFIX}.")
    api.mount(loaded.surface.path.removeprefix(API_PREFIX.rstrip("/")), loaded.router)
api.mount("/", gateway_router)
api.mount("/telemetry", telemetry_router)
api.mount("/", replay_router)


def api_patterns() -> list[URLPattern]:
    """The API's URL patterns, relative to `API_PREFIX`: its operations, document and docs."""
    patterns = api.urls[0]
    assert all(isinstance(pattern, URLPattern) for pattern in patterns)
    return [pattern for pattern in patterns if isinstance(pattern, URLPattern)]


def api_dispatch() -> ApiDispatch:
    """The API's ASGI app: each pattern with its router's envelope (the document and docs pages
    in Mortar's)."""
    return ApiDispatch(
        prefix=API_PREFIX,
        routes=api_routes(api_patterns(), api.mounts, MORTAR_ENVELOPE),
        prefixes=prefix_envelopes(api.mounts),
        envelope=MORTAR_ENVELOPE,
        body_limit=settings.MORTAR_MAX_BODY_BYTES,
    )


# Every error in the route's envelope, whatever raised it: the dispatch put it on the request.


@api.exception_handler(MortarError)
def on_mortar_error(request: ApiRequest, exc: MortarError) -> HttpResponse:
    return error_response(exc, envelope=request.envelope)


@api.exception_handler(NinjaValidationError)
def on_validation_error(request: ApiRequest, exc: NinjaValidationError) -> HttpResponse:
    # Never a 422: a request that is not valid is a 400 like any other.
    return error_response(
        InvalidRequest(f"The request is not valid: {exc.errors}"), envelope=request.envelope
    )


@api.exception_handler(NinjaAuthenticationError)
def on_authentication_error(request: ApiRequest, exc: NinjaAuthenticationError) -> HttpResponse:
    return error_response(
        AuthenticationError("The API key is not valid.", code="invalid_key"),
        envelope=request.envelope,
    )


@api.exception_handler(HttpError)
def on_http_error(request: ApiRequest, exc: HttpError) -> HttpResponse:
    return error_response(error_for_status(exc.status_code, str(exc)), envelope=request.envelope)


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def on_database_away(request: ApiRequest, exc: Exception) -> HttpResponse:
    # A read the answer needs (a key never seen, a stored run, a budget) while the database
    # refuses connections: the client may retry, so a 503 in the route's envelope, not a 500.
    # (What was accepted before is not lost: the run writer spools until the database is back.)
    logger.warning("database unavailable for %s: %s", request.path, exc)
    return error_response(
        BackendUnavailable("The database cannot be reached right now; retry in a moment."),
        envelope=request.envelope,
    )
