"""OpenTelemetry traces: a server process exporting over OTLP/HTTP to a collector held in this
test's memory, the client's `traceparent` continued and passed on to the model server."""

from __future__ import annotations

import http.server
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from tests.conftest import Tenant, _server_env
from tests.support.servers import ServerProcess, start_mortar
from tests.support.upstreams import MockPair, mock_requests, mock_reset

pytestmark = pytest.mark.django_db

STEPS = {"auth", "validate", "plan", "upstream first byte", "relay", "record"}


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, object]


class Collector:
    """The spans an OTLP/HTTP exporter sent to `/v1/traces`, decoded."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                collector.add(request)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self.lock:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        self.spans.append(_span(span))

    def trace(self, trace_id: str, *, until: set[str], timeout: float = 15) -> list[Span]:
        """The spans of `trace_id`, once those named `until` have all arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                spans = [s for s in self.spans if s.trace_id == trace_id]
            if until <= {s.name for s in spans}:
                return spans
            time.sleep(0.05)
        raise AssertionError(f"spans of {trace_id}: {[s.name for s in spans]}")


def _span(span: trace_pb2.Span) -> Span:
    attributes: dict[str, object] = {}
    for item in span.attributes:
        kind = item.value.WhichOneof("value")
        attributes[item.key] = getattr(item.value, kind) if kind else None
    return Span(
        name=span.name,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        kind=span.kind,
        attributes=attributes,
    )


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    collector = Collector()
    yield collector
    collector.server.shutdown()
    collector.server.server_close()


@pytest.fixture(scope="module")
def traced_server(
    collector: Collector, upstream_models: MockPair, tmp_path_factory
) -> Iterator[ServerProcess]:
    env = {
        **_server_env(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_SERVICE_NAME": "mortar-tests",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    server = start_mortar(env, log_dir=tmp_path_factory.mktemp("traced"))
    yield server
    server.stop()


def client_trace() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def sdk(server: ServerProcess, tenant: Tenant) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=tenant.secret, max_retries=0)


def test_a_stream_is_one_span_with_the_pipeline_steps_under_the_clients_trace(
    traced_server: ServerProcess, collector: Collector, upstream_models: MockPair, tenant: Tenant
) -> None:
    mock_reset(upstream_models.a)
    trace_id, client_span, traceparent = client_trace()
    with sdk(traced_server, tenant) as client:
        chunks = list(
            client.chat.completions.create(
                model="mock-one",
                messages=[{"role": "user", "content": "trace me"}],
                stream=True,
                extra_headers={"traceparent": traceparent},
            )
        )
    run_id = chunks[0].id

    spans = collector.trace(trace_id, until=STEPS | {"POST /v1/chat/completions"})
    (root,) = [s for s in spans if s.name == "POST /v1/chat/completions"]
    assert root.parent_span_id == client_span  # the client's span is the parent
    assert root.kind == trace_pb2.Span.SPAN_KIND_SERVER
    assert root.attributes["mortar.run_id"] == run_id
    assert root.attributes["mortar.organization"] == tenant.organization.name
    assert root.attributes["http.response.status_code"] == 200
    steps = {s.name: s for s in spans if s is not root}
    assert set(steps) == STEPS
    assert {s.parent_span_id for s in steps.values()} == {root.span_id}
    for span in steps.values():
        assert not any("key" in name.lower() for name in span.attributes)

    # The model server was sent the trace, with the upstream span as the parent.
    (received,) = mock_requests(upstream_models.a)
    upstream = steps["upstream first byte"]
    assert received["headers"]["traceparent"] == f"00-{trace_id}-{upstream.span_id}-01"


def test_dedupe_is_a_step_of_its_own(
    traced_server: ServerProcess, collector: Collector, tenant: Tenant
) -> None:
    trace_id, _, traceparent = client_trace()
    with sdk(traced_server, tenant) as client:
        client.chat.completions.create(
            messages=[{"role": "user", "content": "once"}],
            model="Qwen/Qwen2.5-7B-Instruct",
            stream=False,
            extra_headers={
                "traceparent": traceparent,
                "X-Mortar-Dedupe": "in-flight",
                "Idempotency-Key": f"trace-{trace_id}",
            },
        )
    spans = collector.trace(trace_id, until={"dedupe", "relay", "record"})
    assert "upstream first byte" not in {s.name for s in spans}  # the scripted model


def test_a_request_without_a_traceparent_starts_a_trace(
    traced_server: ServerProcess, collector: Collector, tenant: Tenant
) -> None:
    with sdk(traced_server, tenant) as client:
        reply = client.chat.completions.create(
            messages=[{"role": "user", "content": "new trace"}],
            model="Qwen/Qwen2.5-7B-Instruct",
            stream=False,
        )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with collector.lock:
            roots = [s for s in collector.spans if s.attributes.get("mortar.run_id") == reply.id]
        if roots:
            break
        time.sleep(0.05)
    (root,) = roots
    assert root.parent_span_id == ""
    assert len(root.trace_id) == 32 and int(root.trace_id, 16) != 0


def test_with_tracing_off_the_model_server_gets_no_traceparent(
    mortar_server: ServerProcess, upstream_models: MockPair, tenant: Tenant
) -> None:
    mock_reset(upstream_models.a)
    _, _, traceparent = client_trace()
    with sdk(mortar_server, tenant) as client:
        client.chat.completions.create(
            model="mock-one",
            messages=[{"role": "user", "content": "untraced"}],
            stream=False,
            extra_headers={"traceparent": traceparent},
        )
    (received,) = mock_requests(upstream_models.a)
    assert "traceparent" not in {name.lower() for name in received["headers"]}


def test_the_messages_route_through_djangos_handler_is_traced_alike(
    traced_server: ServerProcess, collector: Collector, tenant: Tenant
) -> None:
    trace_id, client_span, traceparent = client_trace()
    response = httpx.post(
        f"{traced_server.base_url}/v1/messages",
        json={
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello"}],
        },
        headers={"x-api-key": tenant.secret, "traceparent": traceparent},
    )
    assert response.status_code == 200
    spans = collector.trace(trace_id, until={"POST /v1/messages", "auth", "relay", "record"})
    (root,) = [s for s in spans if s.name == "POST /v1/messages"]
    assert root.parent_span_id == client_span
    assert root.attributes["mortar.run_id"] == response.json()["id"]
    assert {s.parent_span_id for s in spans if s is not root} == {root.span_id}
    assert {"validate", "plan"} <= {s.name for s in spans}
