"""Validate a chat-completions body against Mortar's declared contract (`gateway.contract`),
or refuse it with its code."""

from __future__ import annotations

from gateway.contract.chat import ChatRequest
from gateway.contract.validation import parse_json_body, validate_chat_request


def validate(body: bytes) -> ChatRequest:
    """The request the body asks for, normalized; raise an InvalidRequest to refuse it."""
    return validate_chat_request(parse_json_body(body))
