"""The compare page's diffs: replies word by word (spaces kept, so the pieces rejoin into either
text), long replies by line, tool calls and requests by line."""

from __future__ import annotations

from dashboard.selectors.compare import MAX_WORD_DIFF, DiffPiece, lines_diff, words_diff


def side(pieces: list[DiffPiece], kind: str) -> str:
    """One side's text put back together from the diff: `removed` is the left's, `added` the
    right's."""
    return "".join(piece.text for piece in pieces if piece.kind in ("same", kind))


def test_a_reply_is_diffed_word_by_word() -> None:
    pieces = words_diff("It caps how many tokens.", "It caps how few tokens.")

    assert pieces == [
        DiffPiece("same", "It caps how "),
        DiffPiece("removed", "many"),
        DiffPiece("added", "few"),
        DiffPiece("same", " tokens."),
    ]


def test_the_pieces_rejoin_into_either_text() -> None:
    left = "You said: what does\nmax_tokens  limit?"
    right = "It caps how many tokens\nthe model may generate."

    pieces = words_diff(left, right)

    assert side(pieces, "removed") == left
    assert side(pieces, "added") == right


def test_the_same_text_is_one_piece() -> None:
    assert words_diff("the same reply", "the same reply") == [DiffPiece("same", "the same reply")]
    assert words_diff("", "") == []


def test_long_replies_are_diffed_by_line() -> None:
    left = "word " * MAX_WORD_DIFF + "\nlast line\n"
    right = "word " * MAX_WORD_DIFF + "\nanother line\n"

    pieces = words_diff(left, right)

    assert pieces == [
        DiffPiece("same", "word " * MAX_WORD_DIFF + "\n"),
        DiffPiece("removed", "last line\n"),
        DiffPiece("added", "another line\n"),
    ]


def test_tool_calls_are_diffed_by_line() -> None:
    left = '[\n  {\n    "name": "get_weather",\n    "arguments": "{}"\n  }\n]'
    right = '[\n  {\n    "name": "get_time",\n    "arguments": "{}"\n  }\n]'

    pieces = lines_diff(left, right)

    assert [p for p in pieces if p.kind != "same"] == [
        DiffPiece("removed", '    "name": "get_weather",\n'),
        DiffPiece("added", '    "name": "get_time",\n'),
    ]
    assert side(pieces, "removed") == left and side(pieces, "added") == right
