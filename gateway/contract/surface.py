"""What an API surface is to the pipeline, and the register of those loaded.

A surface — chat completions, Messages, each a package under `gateway.surfaces` — declares its
routes and a `Surface`: how a body becomes the `ChatRequest` the pipeline works with, the run
id's prefix, the error envelope, whether `stream` defaults on, how a reply is rendered (its
`Rendering`), and how a shared answer's usage is read back. Loading its package registers the
`Surface` here; the pipeline finds surfaces by name or by a run's id, and imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured

from core.errors import InvalidParameter, InvalidRequest
from core.http.envelopes import Envelope
from gateway.contract.chat import ChatRequest
from gateway.generation.reply import Delta, Generation
from gateway.models import CatalogModel


class Rendering(Protocol):
    """The bytes of one reply, for its surface. Each event it returns is recorded as one chunk,
    exactly as sent, so a replay re-emits it byte for byte."""

    # The event sent while the model is quiet.
    ping: bytes

    def body(self, generation: Generation, usage: dict[str, Any]) -> bytes:
        """The whole reply as one JSON body (`stream: false`)."""
        ...

    def opening(self) -> list[bytes]:
        """The events that open a stream, before the model's first delta."""
        ...

    def delta(self, delta: Delta) -> list[bytes]:
        """The events one delta of the model makes (maybe none)."""
        ...

    def closing(
        self, generation: Generation, usage: dict[str, Any], *, stopped: bool
    ) -> list[bytes]:
        """The events that end a stream; `stopped` when someone pressed Stop."""
        ...

    def failure(self, error: dict[str, Any]) -> bytes:
        """The one event of an error after the stream started, `error` its body in the
        surface's envelope; nothing follows it."""
        ...


class UnsupportedSurface(InvalidRequest):
    """A model sent to a route that does not serve it: a 400 naming the route that does. Not
    `model_not_available`, which is Mortar's 503 for a model that is listed but not deployed."""

    code = "unsupported_surface"


@dataclass(frozen=True, slots=True)
class RenderingFor:
    """What a reply's rendering is made from, once the request is planned."""

    run_id: str
    created: int
    model: str
    prompt_tokens: int
    chat: ChatRequest
    # The organization's opt-in `"delta": {}` on the chat finish chunk (Messages ignore it).
    finish_chunk_delta: bool = False


@dataclass(frozen=True)
class Surface:
    """One API surface: its name in the catalog (`CatalogModel.surfaces`) and its ways."""

    name: str
    path: str  # where its requests come in (under the API's prefix): a run's route and label
    id_prefix: str  # the run id (and the completion's or message's id) is this + 24 hex
    # The envelope of its errors: the one its router declares, and the one a refusal, a failed
    # generation and a shared answer's error are written in.
    envelope: Envelope
    validate: Callable[[bytes], ChatRequest]
    # Whether `stream` left out streams (Mortar's chat default) or not (Anthropic's).
    streams_by_default: bool
    rendering: Callable[[RenderingFor], Rendering]
    # The usage (OpenAI's shape, as runs keep it) of a leader's answer shared by dedupe.
    shared_usage: Callable[[bytes], dict[str, Any] | None]
    # Whether an image for a model without vision is refused (Messages) rather than dropped.
    images_need_vision: bool = False

    @property
    def route(self) -> str:
        return f"POST {self.path}"

    def admit(self, model: CatalogModel, chat: ChatRequest) -> None:
        """Refuse a model this surface does not serve (400, naming the route that does serve
        it), and images a model cannot see where they are not dropped."""
        if not model.serves(self.name):
            served_on = ", ".join(
                surface.route for surface in _surfaces.values() if model.serves(surface.name)
            )
            raise UnsupportedSurface(
                f"The model `{model.id}` is not served on {self.route}; it is served on "
                f"{served_on or 'no route'}.",
                param="model",
            )
        if self.images_need_vision and chat.has_images and not model.vision:
            raise InvalidParameter(
                f"The model `{model.id}` does not read images; send images to a model with "
                "vision (`GET /v1/models` says which).",
                param="messages",
            )


_surfaces: dict[str, Surface] = {}


def surface_register(surface: Surface) -> Surface:
    """Make `surface` known to the pipeline (its package does, when it is loaded)."""
    for known in _surfaces.values():
        if known.name == surface.name:
            continue
        if known.path == surface.path or surface.id_prefix.startswith(known.id_prefix):
            raise ImproperlyConfigured(f"The surfaces {known.name} and {surface.name} overlap.")
    _surfaces[surface.name] = surface
    return surface


def surface_named(name: str) -> Surface:
    """The registered surface `name` (`CatalogModel.Surfaces`); KeyError for none."""
    return _surfaces[name]


def surface_of_run(run_id: str) -> Surface | None:
    """The surface a run came in on: its id's prefix says which (`chatcmpl-…`, `msg_…`); None
    for an id no surface makes."""
    for surface in _surfaces.values():
        if run_id.startswith(surface.id_prefix):
            return surface
    return None
