"""Anthropic's Messages API, `POST /v1/messages`: the surface Anthropic's SDKs call.

Its body is validated by Anthropic's schema (`request`, each refusal's message in `refusals`)
and translated into the chat request the pipeline works with (`translate`, `validation`); its
reply is a Message or Anthropic's event stream (`rendering`); its errors are in Anthropic's
envelope (`envelope`); `stream` defaults to false, and an image for a model without vision is
refused rather than dropped. Its routes, the message and its token count, are `api.router`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.contract.chat import ChatRequest
from gateway.contract.surface import RenderingFor, Surface, surface_register
from gateway.models import CatalogModel
from gateway.surfaces.messages.envelope import ANTHROPIC_ENVELOPE
from gateway.surfaces.messages.rendering import MessagesRendering, chat_usage_of_message
from gateway.surfaces.messages.validation import validate_messages_request


def messages_rendering(planned: RenderingFor) -> MessagesRendering:
    """The rendering of one planned message."""
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


SURFACE = surface_register(
    Surface(
        name=CatalogModel.Surfaces.ANTHROPIC,
        path="/v1/messages",
        # A run's id is its message's id: `msg_` and 24 hex.
        id_prefix="msg_",
        envelope=ANTHROPIC_ENVELOPE,
        validate=validate_messages_request,
        streams_by_default=False,
        rendering=messages_rendering,
        shared_usage=chat_usage_of_message,
        images_need_vision=True,
    )
)
