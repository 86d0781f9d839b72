"""OpenAI's chat completions, `POST /v1/chat/completions`: the surface Mortar's contract is.

Its body is the pipeline's own request, validated by the contract as it comes
(`gateway.contract.validation`); its reply is OpenAI's completion object or chunk stream
(`rendering`, `chunks`); its errors are in Mortar's envelope; `stream` left out streams. Its
route is `api.router`.
"""

from __future__ import annotations

from core.http.envelopes import MORTAR_ENVELOPE
from gateway.contract.chat import ChatRequest
from gateway.contract.surface import Surface, surface_register
from gateway.contract.validation import parse_json_body, validate_chat_request
from gateway.models import CatalogModel
from gateway.surfaces.chat.rendering import chat_rendering, usage_of_completion


def validate_completion_body(body: bytes) -> ChatRequest:
    """The request a chat-completions body asks for, normalized; raise an InvalidRequest to
    refuse it."""
    return validate_chat_request(parse_json_body(body))


SURFACE = surface_register(
    Surface(
        name=CatalogModel.Surfaces.OPENAI,
        path="/v1/chat/completions",
        # A run's id is its reply's id: `chatcmpl-` and 24 hex, as OpenAI's completions.
        id_prefix="chatcmpl-",
        envelope=MORTAR_ENVELOPE,
        validate=validate_completion_body,
        streams_by_default=True,
        rendering=chat_rendering,
        shared_usage=usage_of_completion,
    )
)
