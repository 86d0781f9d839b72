"""Relay a generation as server-sent events, recording every byte sent.

The events are the surface's (its `Rendering`): for chat completions (OpenAI's) the role chunk,
one chunk per piece, the finish chunk without `delta`, the usage chunk with empty `choices`
when asked for, then `data: [DONE]`; for Messages, Anthropic's event sequence. An
error after the stream started is one event with the error envelope, and the stream closes
with nothing after it (no `[DONE]`), so a client cannot take a broken reply for a whole one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator

from core.errors import MortarError
from core.http.responses import EventStreamResponse
from core.tracing import span_started
from gateway.errors import GenerationFailed
from gateway.relay.relay import STOPPED_FINISH_REASON, Relay, abandon
from gateway.relay.watch import Signal, watch
from telemetry.models import Run

logger = logging.getLogger(__name__)


def streaming_response(relay: Relay) -> EventStreamResponse:
    """The SSE reply; a run whose stream is left unread is closed as cancelled."""
    return EventStreamResponse(
        sse_events(relay), headers=relay.headers, on_finish=lambda: abandon(relay)
    )


async def sse_events(relay: Relay) -> AsyncGenerator[bytes, None]:
    """The stream's events, each recorded as one chunk. Events that are ready together (the
    model server often sends several chunks in one packet) go out in one write: a write per
    event was most of the kernel time of a fast stream."""
    run, rendering = relay.run, relay.rendering
    ready: list[bytes] = []  # recorded, not yet handed on; empty at every wait

    def send(data: bytes) -> None:
        run.chunk(data)
        ready.append(data)

    def take() -> bytes:
        data = b"".join(ready)
        ready.clear()
        return data

    relay_span = span_started("relay")
    try:
        for event in rendering.opening():
            send(event)
        yield take()
        stopped = False
        # aclosing: leaving the loop early must cancel watch's pending read at once.
        async with contextlib.aclosing(
            watch(relay.deltas, ping_interval=relay.ping_interval, stop=relay.stop)
        ) as watched:
            async for delta in watched:
                if delta is Signal.IDLE:
                    if ready:
                        yield take()
                    continue
                if delta is Signal.PING:
                    send(rendering.ping)
                    yield take()
                    continue
                if delta is Signal.STOPPED:
                    stopped = True
                    break
                run.first_token()
                for event in rendering.delta(delta):
                    send(event)
        if stopped:
            # A stop closes the model first (it stops generating, and costing), then ends the
            # stream as the surface ends a stopped one.
            await relay.deltas.aclose()
            relay.generation.finish_reason = STOPPED_FINISH_REASON
        usage = relay.usage()
        for event in rendering.closing(relay.generation, usage.counts, stopped=stopped):
            send(event)
        # Closed, and its hold settled, before the last events go: a client that sends its
        # next request as soon as this stream ends finds the budget settled.
        relay.close_run(
            Run.Status.STOPPED if stopped else Run.Status.COMPLETED, http_status=200, usage=usage
        )
        await run.settled()
        yield take()
    except (asyncio.CancelledError, GeneratorExit):
        # The client went away (the endpoint cancels the response task, or closes this
        # generator): that stops the generation too; the finally closes the model's stream.
        relay.close_run(Run.Status.CANCELLED, http_status=200, error_code="client_disconnected")
        raise
    except Exception as exc:
        if isinstance(exc, MortarError):
            logger.warning("run %s failed mid-stream: %s", run.run_id, exc.message)
            error = exc
        else:
            logger.exception("run %s failed mid-stream", run.run_id)
            error = GenerationFailed("The generation failed.")
        # A failure mid-stream: one event with the envelope, and nothing after it.
        send(rendering.failure(relay.envelope.body(error)))
        relay.close_run(
            Run.Status.FAILED, http_status=200, error_code=error.code, error_message=error.message
        )
        await run.settled()
        yield take()
    finally:
        relay_span.end()
        await relay.deltas.aclose()
        relay.end()
