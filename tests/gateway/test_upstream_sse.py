"""`EventData` (gateway/upstream/event_data.py): a model server's SSE bytes, a read at a time."""

from __future__ import annotations

from gateway.upstream.event_data import EventData


def fed(*pieces: bytes) -> list[list[bytes]]:
    events = EventData()
    return [events.feed(piece) for piece in pieces]


def test_each_read_gives_the_data_of_the_events_it_completes() -> None:
    assert fed(b'data: {"a":1}\n\ndata: {"b"', b":2}\n\ndata: [DONE]\n\n") == [
        [b'{"a":1}'],
        [b'{"b":2}', b"[DONE]"],
    ]


def test_an_event_split_anywhere_waits_for_its_end() -> None:
    assert fed(b"da", b"ta: x\n", b"\n") == [[], [], [b"x"]]


def test_crlf_line_ends_even_split_between_reads() -> None:
    assert fed(b"data: x\r", b"\n\r\n", b"data: y\r\n\r", b"\n") == [[], [b"x"], [], [b"y"]]


def test_comments_and_empty_events_are_skipped_and_data_lines_joined() -> None:
    assert fed(b": ping\n\n\n\nevent: e\ndata:one\ndata: two\n\n") == [[b"one\ntwo"]]
