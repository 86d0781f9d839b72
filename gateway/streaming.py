"""Relay a generation to the client, as SSE events or one JSON body, recording every byte sent.

Chunk order (spec, "Streaming"): the role chunk, one chunk per piece, the finish chunk without
`delta`, the usage chunk with empty `choices` when asked for, then `data: [DONE]`. An error after
the stream started is one event with the error envelope, and the stream closes without `[DONE]`
(PRODUCT.md decision 9).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse

from gateway.chunks import DONE, ChunkEncoder, error_event
from gateway.errors import MortarError
from gateway.generation import Generation
from gateway.responses import error_response
from telemetry.costs import Prices, cached_tokens_of, usage_cost
from telemetry.models import Run
from telemetry.recording import RunRecorder

logger = logging.getLogger(__name__)


class GenerationFailed(MortarError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"


@dataclass
class Relay:
    """One generation on its way out: what produces it, how it is encoded and recorded."""

    deltas: AsyncIterator[dict[str, Any]]
    generation: Generation
    encoder: ChunkEncoder
    recorder: RunRecorder
    prompt_tokens: int
    headers: dict[str, str]
    prices: Prices = field(default_factory=Prices)
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
        completion = self.generation.completion_tokens
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
            finish_reason=self.generation.finish_reason if status == Run.Status.COMPLETED else "",
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


async def with_pings(
    deltas: AsyncIterator[dict[str, Any]], interval: float | None
) -> AsyncIterator[dict[str, Any] | None]:
    """Yield the deltas, and None whenever `interval` seconds pass without one."""
    if not interval:
        async for delta in deltas:
            yield delta
        return
    pending: asyncio.Future[dict[str, Any]] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(deltas))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield None
                continue
            try:
                delta = pending.result()
            except StopAsyncIteration:
                return
            finally:
                if done:
                    pending = None
            yield delta
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending


def streaming_response(relay: Relay, *, include_usage: bool) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        sse_events(relay, include_usage=include_usage),
        content_type="text/event-stream",
        headers=relay.headers,
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def sse_events(relay: Relay, *, include_usage: bool) -> AsyncIterator[bytes]:
    recorder, encoder = relay.recorder, relay.encoder

    def sent(data: bytes) -> bytes:
        recorder.chunk(data)
        return data

    try:
        yield sent(encoder.delta({"role": "assistant"}))
        async for delta in with_pings(relay.deltas, relay.ping_interval):
            if delta is None:
                yield sent(PING)
                continue
            recorder.mark_first_token()
            yield sent(encoder.delta(delta))
        yield sent(encoder.finish(relay.generation.finish_reason))
        if include_usage:
            yield sent(encoder.usage(relay.usage()[0]))
        yield sent(DONE)
        relay.close_run(Run.Status.COMPLETED, http_status=200)
    except (asyncio.CancelledError, GeneratorExit):
        # The client went away (Django cancels the response task, or closes this generator).
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
        yield sent(error_event(error.envelope()))
        relay.close_run(
            Run.Status.FAILED, http_status=200, error_code=error.code, error_message=error.message
        )
    finally:
        await relay.deltas.aclose()  # type: ignore[attr-defined]


async def json_response(relay: Relay) -> HttpResponse:
    """Run the generation to its end and answer with one `chat.completion` object."""
    try:
        async for _ in relay.deltas:
            relay.recorder.mark_first_token()
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
    generation = relay.generation
    body = relay.encoder.completion(
        message=generation.message(),
        finish_reason=generation.finish_reason,
        usage=relay.usage()[0],
    )
    relay.recorder.chunk(body)
    relay.close_run(Run.Status.COMPLETED, http_status=200)
    return HttpResponse(body, content_type="application/json", headers=relay.headers)
