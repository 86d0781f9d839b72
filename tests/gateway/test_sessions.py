"""Unit tests of sessions and end users (`X-Mortar-Session`, `user`)."""

from __future__ import annotations

import re

import pytest

from gateway.sessions import clean_end_user, end_user_for, sanitize_session, session_for

NEW_SESSION = re.compile(r"sess_[0-9a-f]{24}")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("conv-42_a.b:c", "conv-42_a.b:c", id="all-allowed"),
        pytest.param("my session/#1!", "mysession1", id="others-dropped"),
        pytest.param("café ☕ 1", "caf1", id="non-ascii-dropped"),
        pytest.param("\tline\nbreak\x00", "linebreak", id="control-dropped"),
        pytest.param("a" * 129, "a" * 128, id="129-cut-to-128"),
        pytest.param("a" * 128, "a" * 128, id="128-kept"),
        pytest.param("!" * 200 + "b" * 130, "b" * 128, id="cut-after-dropping"),
        pytest.param("", "", id="empty"),
        pytest.param(None, "", id="none"),
        pytest.param("/// ???", "", id="nothing-allowed"),
    ],
)
def test_sanitize_session(value: str | None, expected: str) -> None:
    assert sanitize_session(value) == expected


def test_the_header_names_the_session() -> None:
    assert session_for("conv-1", "alice") == ("conv-1", False)


def test_the_user_names_the_session_without_the_header() -> None:
    assert session_for(None, "alice@example.com") == ("aliceexample.com", False)


def test_a_header_with_no_allowed_character_falls_back_to_the_user() -> None:
    assert session_for("???", "alice") == ("alice", False)


@pytest.mark.parametrize(
    ("header", "user"),
    [
        pytest.param(None, None, id="neither"),
        pytest.param("", "", id="both-empty"),
        pytest.param("   ", "!!!", id="nothing-allowed-in-either"),
    ],
)
def test_with_neither_the_request_starts_a_new_session(
    header: str | None, user: str | None
) -> None:
    session, started = session_for(header, user)

    assert NEW_SESSION.fullmatch(session)
    assert started is True


def test_each_new_session_is_different() -> None:
    assert session_for(None, None)[0] != session_for(None, None)[0]


def test_the_end_user_header_wins_over_the_user() -> None:
    assert end_user_for("user-from-header", "user-from-body") == "user-from-header"


def test_the_user_is_the_end_user_without_the_header() -> None:
    assert end_user_for(None, "alice@example.com") == "alice@example.com"


def test_without_either_there_is_no_end_user() -> None:
    assert end_user_for(None, None) == ""


def test_a_non_printable_header_falls_back_to_the_user() -> None:
    assert end_user_for("bad\x07bell", "alice") == "alice"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("alice", "alice", id="plain"),
        pytest.param("  Alice Smith \t", "Alice Smith", id="trimmed"),
        pytest.param("Zoë 日本", "Zoë 日本", id="non-ascii-printable-kept"),
        pytest.param("x" * 300, "x" * 256, id="cut-to-256"),
        pytest.param("x" * 256, "x" * 256, id="256-kept"),
        pytest.param("  " + "y" * 256 + "  ", "y" * 256, id="trimmed-then-256"),
        pytest.param("bob\x00", "", id="nul-dropped"),
        pytest.param("bob\nsmith", "", id="newline-dropped"),
        pytest.param("\x1b[31mred", "", id="escape-dropped"),
        pytest.param("   ", "", id="blank"),
        pytest.param("", "", id="empty"),
        pytest.param(None, "", id="none"),
        pytest.param(42, "", id="number"),
    ],
)
def test_clean_end_user(value: object, expected: str) -> None:
    assert clean_end_user(value) == expected  # type: ignore[arg-type]
