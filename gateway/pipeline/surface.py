"""The API surfaces a completion can be asked for through, and all that differs between them.

One pipeline serves both (`gateway.pipeline`): OpenAI's chat completions and Anthropic's
Messages differ only in what a `Surface` holds — its route, how a body becomes the
`ChatRequest` the pipeline works with, the run id's prefix, the error envelope, whether
`stream` defaults on, how the reply is rendered, and how a shared answer's usage is read back.
The run, its chunks, replay, stop, dedupe, telemetry and cost are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from core.errors import InvalidParameter, InvalidRequest
from core.http.envelopes import MORTAR_ENVELOPE, Envelope
from gateway.anthropic.envelope import ANTHROPIC_ENVELOPE
from gateway.anthropic.rendering import MessagesRendering, chat_usage_of_message
from gateway.anthropic.validation import validate_messages_request
from gateway.contract.chat import ChatRequest
from gateway.models import CatalogModel
from gateway.pipeline.validate import validate
from gateway.relay.chunks import ChunkEncoder
from gateway.relay.rendering import ChatRendering, Rendering

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
MESSAGES_PATH = "/v1/messages"
# A run's id is its reply's id, and says which surface made it: a chat completion's `chatcmpl-`
# + 24 hex, a Message's `msg_` + 24 hex.
COMPLETION_ID_PREFIX = "chatcmpl-"
MESSAGE_ID_PREFIX = "msg_"
# The route that serves each surface, for a refusal that names it (`CatalogModel.Surfaces`).
ROUTES = {
    CatalogModel.Surfaces.OPENAI: f"POST {CHAT_COMPLETIONS_PATH}",
    CatalogModel.Surfaces.ANTHROPIC: f"POST {MESSAGES_PATH}",
}


class UnsupportedSurface(InvalidRequest):
    """A model sent to a route that does not serve it: a 400 naming the route that does. Not
    `model_not_available`, which is Mortar's 503 for a model that is listed but not deployed."""

    code = "unsupported_surface"


@dataclass(frozen=True)
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
    path: str  # where its requests come in: a run's route, and its metrics' label
    id_prefix: str  # the run id (and the completion's or message's id) is this + 24 hex
    # The envelope of its errors: the one its route declares, and the one a refusal, a failed
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
        return ROUTES[CatalogModel.Surfaces(self.name)]

    def admit(self, model: CatalogModel, chat: ChatRequest) -> None:
        """Refuse a model this surface does not serve (400, naming the route that does serve
        it), and images a model cannot see where they are not dropped."""
        if not model.serves(self.name):
            other = ROUTES[CatalogModel.Surfaces(model.surfaces)]
            raise UnsupportedSurface(
                f"The model `{model.id}` is not served on {self.route}; it is served on {other}.",
                param="model",
            )
        if self.images_need_vision and chat.has_images and not model.vision:
            raise InvalidParameter(
                f"The model `{model.id}` does not read images; send images to a model with "
                "vision (`GET /v1/models` says which).",
                param="messages",
            )


def _chat_rendering(planned: RenderingFor) -> Rendering:
    encoder = ChunkEncoder(
        completion_id=planned.run_id, created=planned.created, model=planned.model
    )
    return ChatRendering(
        encoder,
        include_usage=planned.chat.include_usage,
        finish_chunk_delta=planned.finish_chunk_delta,
    )


def _messages_rendering(planned: RenderingFor) -> Rendering:
    return MessagesRendering(
        message_id=planned.run_id,
        created=planned.created,
        model=planned.model,
        prompt_tokens=planned.prompt_tokens,
        stop_sequences=_stop_sequences(planned.chat),
    )


def _stop_sequences(chat: ChatRequest) -> Sequence[str]:
    stop = chat.sampling.get("stop")  # the translated `stop_sequences`: always a list
    return stop if isinstance(stop, list) else ()


def _chat_usage(body: bytes) -> dict[str, Any] | None:
    try:
        usage = orjson.loads(body).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return usage if isinstance(usage, dict) else None


CHAT_COMPLETIONS = Surface(
    name=CatalogModel.Surfaces.OPENAI,
    path=CHAT_COMPLETIONS_PATH,
    id_prefix=COMPLETION_ID_PREFIX,
    envelope=MORTAR_ENVELOPE,
    validate=validate,
    streams_by_default=True,
    rendering=_chat_rendering,
    shared_usage=_chat_usage,
)

MESSAGES = Surface(
    name=CatalogModel.Surfaces.ANTHROPIC,
    path=MESSAGES_PATH,
    id_prefix=MESSAGE_ID_PREFIX,
    envelope=ANTHROPIC_ENVELOPE,
    validate=validate_messages_request,
    streams_by_default=False,
    rendering=_messages_rendering,
    shared_usage=chat_usage_of_message,
    images_need_vision=True,
)


def surface_of_run(run_id: str) -> Surface:
    """The surface a run came in on: its id says which (a Messages run's is `msg_…`)."""
    return MESSAGES if run_id.startswith(MESSAGES.id_prefix) else CHAT_COMPLETIONS
