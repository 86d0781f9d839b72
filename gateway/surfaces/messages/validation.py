"""Turn a raw Messages body into the `ChatRequest` the pipeline plans and generates from.

Three steps, each with one job: the body is decoded as strictly as a chat body (orjson: strict
UTF-8, one JSON object) and validated by the Messages schema (`request.py`; a refusal is the
first refused field's, from `refusals.py`); the valid request is translated into a chat request
(`translate.messages_to_chat`); and that goes through the chat contract's own validation, so a
Messages request is normalized exactly as a chat request is (and is refused if the translation
ever made something the chat contract does not accept). What the chat fields cannot say — the
thinking switch, whether there were images — is set on the `ChatRequest` after.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gateway.contract.chat import ChatRequest
from gateway.contract.validation import parse_json_body, validate_chat_request
from gateway.surfaces.messages.refusals import refusal_for
from gateway.surfaces.messages.request import count_tokens_request_schema, messages_request_schema
from gateway.surfaces.messages.translate import messages_to_chat

_validate_messages = messages_request_schema.validate_python
_validate_count = count_tokens_request_schema.validate_python


def validate_messages_request(body: bytes) -> ChatRequest:
    """The chat request a `POST /v1/messages` body asks for; raise an InvalidRequest to refuse."""
    try:
        request = _validate_messages(parse_json_body(body))
    except ValidationError as invalid:
        raise refusal_for(invalid) from None
    return _as_chat(request)


def validate_count_tokens_request(body: bytes) -> ChatRequest:
    """The chat request a `POST /v1/messages/count_tokens` body would make, to count it."""
    try:
        request = _validate_count(parse_json_body(body))
    except ValidationError as invalid:
        raise refusal_for(invalid) from None
    return _as_chat(request)


def _as_chat(request: Mapping[str, Any]) -> ChatRequest:
    translated = messages_to_chat(request)
    chat = validate_chat_request(translated)
    chat.enable_thinking = translated.get("enable_thinking")
    chat.has_images = has_images(request)
    # A Messages body is not OpenAI's: a deployment's extra fields are chat-completions fields,
    # and none is read from it.
    chat.sent = {}
    return chat


def has_images(request: Mapping[str, Any]) -> bool:
    """Whether any message holds an image block (images are only valid on user messages)."""
    for message in request["messages"]:
        content = message["content"]
        if not isinstance(content, str) and any(block["type"] == "image" for block in content):
            return True
    return False
