"""The API surfaces Mortar serves, each a package here that plugs into the one pipeline.

A surface's package declares its `SURFACE` (`gateway.contract.surface.Surface`: how its body
becomes the pipeline's request, its run ids, its error envelope, how its reply is rendered),
registered when the package is loaded, and its routes (`api.router`, mounted at the surface's
path). The pipeline (`gateway.pipeline`) imports none of them: adding a surface is a package
beside these and its line below (docs/architecture.md, "Adding a surface").
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from core.http.routes import ApiRouter
from gateway.contract.surface import Surface

SURFACES = (
    "gateway.surfaces.chat",
    "gateway.surfaces.messages",
)


@dataclass(frozen=True)
class SurfaceRoutes:
    """A loaded surface and the router of its routes."""

    surface: Surface
    router: ApiRouter


def surfaces_load() -> list[SurfaceRoutes]:
    """Load every surface's package (which registers its surface) and its routes."""
    loaded = []
    for package in SURFACES:
        surface = import_module(package).SURFACE
        router = import_module(f"{package}.api").router
        loaded.append(SurfaceRoutes(surface, router))
    return loaded
