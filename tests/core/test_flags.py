"""`core.flags.Flag`: set once, its listeners told at once, in order, and only once."""

from __future__ import annotations

from core.flags import Flag


def test_listeners_are_called_when_the_flag_is_set_in_the_order_they_came() -> None:
    flag, heard = Flag(), []
    flag.listen(lambda: heard.append("first"))
    flag.listen(lambda: heard.append("second"))
    assert heard == [] and not flag.is_set()

    flag.set()
    flag.set()  # a second set tells nobody again

    assert heard == ["first", "second"]
    assert flag.is_set()


def test_a_listener_that_comes_after_the_flag_was_set_is_called_at_once() -> None:
    flag, heard = Flag(), []
    flag.set()

    flag.listen(lambda: heard.append("late"))

    assert heard == ["late"]


def test_a_listener_that_stopped_listening_is_not_called() -> None:
    flag, heard = Flag(), []
    stop_listening = flag.listen(lambda: heard.append("gone"))
    flag.listen(lambda: heard.append("stays"))

    stop_listening()
    stop_listening()  # twice is harmless
    flag.set()

    assert heard == ["stays"]
