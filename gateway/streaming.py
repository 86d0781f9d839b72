"""Relay a generation to the client, as SSE events or one JSON body, recording every byte sent.

Chunk order (spec, "Streaming"): the role chunk, one chunk per piece, the finish chunk without
`delta`, the usage chunk with empty `choices` when asked for, then `data: [DONE]`. An error after
the stream started is one event with the error envelope, and the stream closes without `[DONE]`
(PRODUCT.md decision 9).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpResponse

from gateway.chunks import DONE, ChunkEncoder, error_event
from gateway.errors import MortarError
from gateway.generation import Generation
from gateway.responses import error_response
from telemetry.costs import Prices, cached_tokens_of, usage_cost
from telemetry.models import Run
from telemetry.recording import RunRecorder

logger = logging.getLogger(__name__)

# A stopped non-streaming reply says so (the spec leaves it open; OpenAI's values don't cover it).
STOPPED_FINISH_REASON = "stopped"


class GenerationFailed(MortarError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"


@dataclass
class Relay:
    """One generation on its way out: what produces it, how it is encoded and recorded."""

    # The model's deltas, a list per batch that arrived together (never empty).
    deltas: AsyncIterator[list[dict[str, Any]]]
    generation: Generation
    encoder: ChunkEncoder
    recorder: RunRecorder
    prompt_tokens: int
    headers: dict[str, str]
    prices: Prices = field(default_factory=Prices)
    # Set when someone presses Stop (gateway/live.py); `release` unregisters the generation.
    stop: asyncio.Event | None = None
    release: Callable[[], Awaitable[None]] | None = None
    # Seconds of upstream silence before a `: ping` comment (spec: every 10 s when the
    # deployment forwards to a model server); None for the scripted model.
    ping_interval: float | None = None

    def usage(self) -> tuple[dict[str, Any], str]:
        """The usage to report and its source: the model server's own counts when it sent
        them (details passed through unchanged), else Mortar's estimate."""
        reported = self.generation.upstream_usage
        if (
            reported is not None
            and not self.generation.cut_by_mortar
            and isinstance(reported.get("prompt_tokens"), int)
            and isinstance(reported.get("completion_tokens"), int)
        ):
            return reported, Run.UsageSource.UPSTREAM
        completion = self.generation.own_completion_tokens()
        estimate = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }
        return estimate, Run.UsageSource.ESTIMATE

    def close_run(self, status: str, **fields: Any) -> None:
        usage, source = self.usage()
        self.recorder.close(
            status=status,
            finish_reason=self.generation.finish_reason
            if status in (Run.Status.COMPLETED, Run.Status.STOPPED)
            else "",
            prompt_tokens=usage["prompt_tokens"],
            completion_tokens=usage["completion_tokens"],
            total_tokens=usage.get("total_tokens", 0),
            cached_tokens=cached_tokens_of(usage),
            cost=usage_cost(usage, self.prices),
            usage=usage,
            usage_source=source,
            **fields,
        )


PING = b": ping\n\n"


class Signal(enum.Enum):
    PING = "ping"  # the model has been quiet for the ping interval
    STOPPED = "stopped"  # someone pressed Stop
    IDLE = "idle"  # no delta is ready: what is pending should go out now


# Batches of deltas read ahead of the client at most; past that the model's stream waits.
WATCH_QUEUE_SIZE = 64
_END = object()  # the model's stream ended


@dataclass(frozen=True)
class _Failed:
    error: Exception  # the model's stream raised this


async def watch(
    deltas: AsyncIterator[list[dict[str, Any]]],
    *,
    ping_interval: float | None,
    stop: asyncio.Event | None,
) -> AsyncIterator[dict[str, Any] | Signal]:
    """Yield the deltas one by one; Signal.IDLE whenever no further delta is ready yet;
    Signal.PING after `ping_interval` quiet seconds; Signal.STOPPED (and nothing after it) as
    soon as `stop` is set, even while the model is silent.

    One task reads the model for the whole stream and hands batches over a small queue; a timer
    and the stop flag only ever add a wake-up to that queue. (A task and an `asyncio.wait` per
    delta, the obvious way to race a read against a timeout and a flag, cost ~30 µs a chunk.)
    """
    if ping_interval is None and stop is None:
        async for batch in deltas:
            for delta in batch:
                yield delta
            yield Signal.IDLE
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=WATCH_QUEUE_SIZE)
    last_event = loop.time()

    def wake(item: Any) -> None:
        # A full queue means the reader is not waiting: it sees the flag on its next item.
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait(item)

    async def read() -> None:
        try:
            async for batch in deltas:
                if queue.full():
                    await queue.put(batch)  # the client reads slower than the model writes
                else:
                    queue.put_nowait(batch)
        except Exception as exc:  # handed to the reader, raised there
            await queue.put(_Failed(exc))
        else:
            await queue.put(_END)

    def quiet_check() -> None:
        nonlocal ping_timer
        quiet_until = last_event + ping_interval  # type: ignore[operator]
        if loop.time() >= quiet_until:
            wake(Signal.PING)
            quiet_until = loop.time() + ping_interval  # type: ignore[operator]
        ping_timer = loop.call_at(quiet_until, quiet_check)

    reader = loop.create_task(read())
    stopped = None
    if stop is not None:
        stopped = asyncio.ensure_future(stop.wait())
        stopped.add_done_callback(lambda _: wake(Signal.STOPPED))
    ping_timer = loop.call_at(last_event + ping_interval, quiet_check) if ping_interval else None
    try:
        while True:
            if queue.empty():
                yield Signal.IDLE
                item = await queue.get()
            else:
                item = queue.get_nowait()
            if stop is not None and stop.is_set():
                yield Signal.STOPPED
                return
            if item is Signal.STOPPED:
                continue  # a wake-up for a flag that is not set (cannot happen; harmless)
            if item is Signal.PING:
                last_event = loop.time()
                yield Signal.PING
                continue
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            last_event = loop.time()
            for delta in item:
                yield delta
    finally:
        if ping_timer is not None:
            ping_timer.cancel()
        for future in (reader, stopped):
            if future is None:
                continue
            if not future.done():
                future.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await future  # let the model's stream close before anyone else touches it


async def abandon(relay: Relay) -> None:
    """Close a run whose stream was never read (the client left before the first chunk).

    A no-op for a run that ended: only a run's first close counts, and release is idempotent.
    """
    relay.close_run(Run.Status.CANCELLED, http_status=200, error_code="client_disconnected")
    if relay.release is not None:
        await relay.release()


@dataclass
class EventStream:
    """A streaming reply: its headers, its SSE events, and what to call once it is over."""

    headers: dict[str, str]
    events: AsyncIterator[bytes]
    relay: Relay

    async def finished(self) -> None:
        """Called once the response is over, read or not (gateway/chat_endpoint.py)."""
        await abandon(self.relay)


def streaming_response(relay: Relay, *, include_usage: bool) -> EventStream:
    return EventStream(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            **relay.headers,
        },
        events=sse_events(relay, include_usage=include_usage),
        relay=relay,
    )


async def sse_events(relay: Relay, *, include_usage: bool) -> AsyncIterator[bytes]:
    """The stream's events, each recorded as one chunk. Events that are ready together (the
    model server often sends several chunks in one packet) go out in one write: a write per
    event was most of the kernel time of a fast stream."""
    recorder, encoder = relay.recorder, relay.encoder
    ready: list[bytes] = []  # recorded, not yet handed on; empty at every wait

    def send(data: bytes) -> None:
        recorder.chunk(data)
        ready.append(data)

    def take() -> bytes:
        data = b"".join(ready)
        ready.clear()
        return data

    try:
        send(encoder.delta({"role": "assistant"}))
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
                    send(PING)
                    yield take()
                    continue
                if delta is Signal.STOPPED:
                    stopped = True
                    break
                recorder.mark_first_token()
                send(encoder.delta(delta))  # type: ignore[arg-type]
        if stopped:
            # Spec, "When a stream ends early": a stopped generation sends no finish chunk;
            # the usage chunk, if asked for, and [DONE] still follow. Close the model first.
            await relay.deltas.aclose()  # type: ignore[attr-defined]
            relay.generation.finish_reason = STOPPED_FINISH_REASON
        else:
            send(encoder.finish(relay.generation.finish_reason))
        if include_usage:
            send(encoder.usage(relay.usage()[0]))
        send(DONE)
        yield take()
        relay.close_run(Run.Status.STOPPED if stopped else Run.Status.COMPLETED, http_status=200)
    except (asyncio.CancelledError, GeneratorExit):
        # The client went away (the endpoint cancels the response task, or closes this
        # generator): that stops the generation too; the finally closes the model's stream.
        relay.close_run(Run.Status.CANCELLED, http_status=200, error_code="client_disconnected")
        raise
    except Exception as exc:
        if isinstance(exc, MortarError):
            logger.warning("run %s failed mid-stream: %s", recorder.run_id, exc.message)
            error = exc
        else:
            logger.exception("run %s failed mid-stream", recorder.run_id)
            error = GenerationFailed("The generation failed.")
        # Spec, "When a stream ends early": one event with the envelope, no [DONE].
        send(error_event(error.envelope()))
        yield take()
        relay.close_run(
            Run.Status.FAILED, http_status=200, error_code=error.code, error_message=error.message
        )
    finally:
        await relay.deltas.aclose()  # type: ignore[attr-defined]
        if relay.release is not None:
            await relay.release()


class CancelOnStop:
    """Inside the block, cancel the running task as soon as `stop` is set; the block then ends
    quietly with `stopped` true. A cancellation from anywhere else goes on as usual."""

    def __init__(self, stop: asyncio.Event | None):
        self.stop = stop
        self.stopped = False
        self._inside = False
        self._task: asyncio.Task[Any] | None = None
        self._waiter: asyncio.Future[Any] | None = None

    def __enter__(self) -> CancelOnStop:
        if self.stop is not None:
            self._task = asyncio.current_task()
            self._inside = True
            self._waiter = asyncio.ensure_future(self.stop.wait())
            self._waiter.add_done_callback(self._on_stop)
        return self

    def _on_stop(self, waiter: asyncio.Future[Any]) -> None:
        if self._inside and not waiter.cancelled() and self._task is not None:
            self.stopped = True
            self._task.cancel()

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        self._inside = False
        if self._waiter is not None:
            self._waiter.cancel()
        if self.stopped and kind is asyncio.CancelledError and self._task is not None:
            return self._task.uncancel() == 0  # swallow our own cancel, and only ours
        return False


async def json_response(relay: Relay) -> HttpResponse:
    """Run the generation to its end — or its stop — and answer with one object.

    The deltas are read in this task, without `watch`: there are no pings to send while the
    model is silent, and a stop cancels the read itself."""
    status = Run.Status.COMPLETED
    try:
        with CancelOnStop(relay.stop) as stopping:
            async for _ in relay.deltas:
                relay.recorder.mark_first_token()
        if stopping.stopped:
            # What was generated so far, with finish_reason "stopped" (README).
            status = Run.Status.STOPPED
            relay.generation.finish_reason = STOPPED_FINISH_REASON
        generation = relay.generation
        body = relay.encoder.completion(
            message=generation.message(),
            finish_reason=generation.finish_reason,
            usage=relay.usage()[0],
        )
        # Closed before the awaits below: a client that leaves during them must not leave the
        # run in progress.
        relay.recorder.chunk(body)
        relay.close_run(status, http_status=200)
        return HttpResponse(body, content_type="application/json", headers=relay.headers)
    except asyncio.CancelledError:
        relay.close_run(Run.Status.CANCELLED, http_status=499, error_code="client_disconnected")
        raise
    except MortarError as error:
        response = error_response(error, relay.headers)
        relay.recorder.chunk(response.content)
        relay.close_run(
            Run.Status.FAILED,
            http_status=error.status,
            error_code=error.code,
            error_message=error.message,
        )
        return response
    finally:
        await relay.deltas.aclose()  # type: ignore[attr-defined]
        if relay.release is not None:
            await relay.release()
