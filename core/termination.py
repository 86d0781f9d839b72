"""Hear the server's termination signal first: what must end before the server can stop.

uvicorn (and daphne) answer SIGTERM by waiting for every open response to end; a response
that never ends by itself — a telemetry stream — would keep the worker up for ever. The
callbacks registered here run as soon as SIGTERM or SIGINT arrives, on the event loop, and the
server's own handler runs right after, as it would have.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_termination(callback: Callable[[], None]) -> None:
    """Call `callback()` on the running loop when SIGTERM or SIGINT arrives (once)."""
    if threading.current_thread() is not threading.main_thread():
        logger.info("not on the main thread: shutdown is not heard early")
        return
    loop = asyncio.get_running_loop()
    called = False

    def call_once() -> None:
        nonlocal called
        if not called:
            called = True
            callback()

    for number in SIGNALS:
        previous = signal.getsignal(number)

        def handler(
            signum: int,
            frame: FrameType | None,
            previous: Callable[[int, FrameType | None], object] | int | None = previous,
        ) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(call_once)
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                # Nobody else handles it: end as the default would.
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(number, handler)
