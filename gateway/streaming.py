"""Relay a generation to the client, as SSE events or one JSON body, recording every byte sent.

Chunk order (spec, "Streaming"): the role chunk, one chunk per piece, the finish chunk without
`delta`, the usage chunk with empty `choices` when asked for, then `data: [DONE]`. An error after
the stream started is one event with the error envelope, and the stream closes without `[DONE]`
(PRODUCT.md decision 9).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse

from gateway.chunks import DONE, ChunkEncoder, error_event
from gateway.errors import MortarError
from gateway.scripted import Generation
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

    def usage(self) -> dict[str, int]:
        completion = self.generation.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }

    def close_run(self, status: str, **fields: Any) -> None:
        usage = self.usage()
        self.recorder.close(
            status=status,
            finish_reason=self.generation.finish_reason if status == Run.Status.COMPLETED else "",
            completion_tokens=usage["completion_tokens"],
            total_tokens=usage["total_tokens"],
            usage_source=Run.UsageSource.ESTIMATE,
            **fields,
        )


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
        async for delta in relay.deltas:
            recorder.mark_first_token()
            yield sent(encoder.delta(delta))
        yield sent(encoder.finish(relay.generation.finish_reason))
        if include_usage:
            yield sent(encoder.usage(relay.usage()))
        yield sent(DONE)
        relay.close_run(Run.Status.COMPLETED, http_status=200)
    except (asyncio.CancelledError, GeneratorExit):
        # The client went away (Django cancels the response task, or closes this generator).
        relay.close_run(Run.Status.CANCELLED, http_status=200, error_code="client_disconnected")
        raise
    except Exception as exc:
        logger.exception("generation %s failed mid-stream", recorder.run_id)
        error = exc if isinstance(exc, MortarError) else GenerationFailed("The generation failed.")
        yield sent(error_event(error.envelope()))
        relay.close_run(
            Run.Status.FAILED, http_status=200, error_code=error.code, error_message=str(exc)
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
    generation = relay.generation
    body = relay.encoder.completion(
        content=generation.content,
        tool_calls=generation.tool_calls or None,
        finish_reason=generation.finish_reason,
        usage=relay.usage(),
    )
    relay.recorder.chunk(body)
    relay.close_run(Run.Status.COMPLETED, http_status=200)
    return HttpResponse(body, content_type="application/json", headers=relay.headers)
