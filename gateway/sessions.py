"""Sessions and end users: which conversation a request belongs to, and who it is for."""

from __future__ import annotations

import re

from core.ids import new_hex_id

SESSION_MAX = 128
END_USER_MAX = 256
_NOT_SESSION_CHAR = re.compile(r"[^A-Za-z0-9\-_.:]")


def sanitize_session(value: str | None) -> str:
    """Keep the allowed characters, at most 128 (the documented limit of `X-Mortar-Session`)."""
    if not value:
        return ""
    return _NOT_SESSION_CHAR.sub("", value)[:SESSION_MAX]


def session_for(header: str | None, user: str | None) -> tuple[str, bool]:
    """Return the session and whether the request started it.

    `X-Mortar-Session` names it; else the body's `user`; with neither, a new session.
    """
    named = sanitize_session(header) or sanitize_session(user)
    if named:
        return named, False
    return f"sess_{new_hex_id()}", True


def clean_end_user(value: str | None) -> str:
    """Trim to 256 printable characters; anything else is dropped silently: an end
    user's name is a label, never a reason to refuse a request."""
    if not isinstance(value, str):
        return ""
    value = value.strip()
    if not value or not value.isprintable():
        return ""
    return value[:END_USER_MAX]


def end_user_for(header: str | None, user: str | None) -> str:
    """`X-Mortar-End-User-Id` wins over the body's `user`."""
    return clean_end_user(header) or clean_end_user(user)
