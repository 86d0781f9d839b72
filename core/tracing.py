"""OpenTelemetry traces of API requests: off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

On, each request the wrapped app serves is one server span (`trace_requests`, the ASGI wrapper
config puts in front of the API), child of the client's W3C `traceparent` when it sent one;
the pipeline's steps are its child spans (`step`: auth, validate, plan, dedupe, upstream first
byte, relay, record), the run id and the organization its attributes (`annotate`), and the
model server is sent the `traceparent` of the upstream span (`inject_trace`). Spans go to the
OTLP/HTTP exporter in batches, configured by the standard `OTEL_*` variables (endpoint,
headers, `OTEL_SERVICE_NAME`, the batch's delays).

Off, nothing is made: the wrapper is not installed, `step` hands back one shared no-op context
and the others return at their first line — the hot path pays a function call and a test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings

from core.http.asgi import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer


_NO_SPAN = contextlib.nullcontext()
_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def tracing_start() -> bool:
    """Set up the tracer and its exporter when an endpoint is configured; say whether it is."""
    global _tracer, _provider
    if _tracer is not None:
        return True
    if not settings.OTEL_EXPORTER_OTLP_ENDPOINT:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": settings.OTEL_SERVICE_NAME})
    _provider = TracerProvider(resource=resource)
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _tracer = _provider.get_tracer("mortar")
    return True


def tracing_stop() -> None:
    """Export what is left (at shutdown)."""
    if _provider is not None:
        _provider.shutdown()


def step(name: str) -> contextlib.AbstractContextManager[Any]:
    """A child span of the current one for a step of the pipeline (a no-op when off)."""
    if _tracer is None:
        return _NO_SPAN
    return _tracer.start_as_current_span(name)


class Ending(Protocol):
    def end(self) -> None: ...


class _NoSpan:
    def end(self) -> None:
        pass


_NO_STARTED_SPAN = _NoSpan()


def span_started(name: str) -> Ending:
    """A child span of the current one, never made current itself, ended by `end()`: for a
    step inside an async generator (the relay), which may be closed from another context than
    the one it started in."""
    if _tracer is None:
        return _NO_STARTED_SPAN
    return _tracer.start_span(name)


def annotate(**attributes: str | int) -> None:
    """Set attributes of the request's span (`mortar.<name>`)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    span = trace.get_current_span()
    for name, value in attributes.items():
        span.set_attribute(f"mortar.{name}", value)


def inject_trace(headers: dict[str, str]) -> None:
    """Add the current span's `traceparent` to an outbound request's headers."""
    if _tracer is None:
        return
    from opentelemetry import propagate

    propagate.inject(headers)


def trace_requests(app: ASGIApp) -> ASGIApp:
    """Wrap `app`: each request is a server span, the client's trace continued."""
    assert _tracer is not None
    tracer = _tracer
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind, StatusCode

    async def traced(scope: Scope, receive: Receive, send: Send) -> None:
        carrier = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
        }
        method, path = scope["method"], scope["path"]
        with tracer.start_as_current_span(
            f"{method} {path}",
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        ) as span:

            async def send_status(message: Mapping[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    _status(span, message["status"], StatusCode.ERROR)
                await send(message)

            await app(scope, receive, send_status)

    return traced


def _status(span: Span, status: int, error: Any) -> None:
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(error)
