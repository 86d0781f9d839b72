"""The declared contract against the real server: /v1/openapi.json, fuzzed with schemathesis.

The document is loaded from a real server process, and every /v1/ operation gets generated
requests — valid ones, invalid ones, and the documents' own examples — with a valid key. Each
answer must be one the document declares (status, content type, headers, body schema), and
never a 5xx or a 422 (bad input is a 400 in the route's envelope). The live telemetry stream
never ends by design, so its requests are made by hand as streams: their headers and first line
are checked, then the stream is closed.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.contract.examples import CHAT_REQUESTS
from gateway.surfaces.messages.examples import MESSAGES_REQUESTS
from tests.conftest import Tenant
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

# Generated requests per operation (the documents' examples come on top). Chat completions get
# the most: their body is the contract with the most to get wrong.
BUDGET = {
    "create_chat_completion": 120,
    "create_message": 100,
    "count_message_tokens": 30,
    "list_models": 15,
    "get_budget": 10,
    "stop_generation": 30,
    "replay_run": 16,
    "rerun_run": 16,
    "telemetry_stream": 30,
}
TELEMETRY_STREAM = "telemetry_stream"
EVENT_STREAM = re.compile(r"text/event-stream(;|$)")
STREAM_OPEN_SECONDS = 0.25


@dataclass
class Tally:
    """Requests sent per operation and their statuses, and when the first was sent."""

    started: float = field(default_factory=time.monotonic)
    requests: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)

    def count(self, operation_id: str, status: int) -> None:
        self.requests[operation_id] += 1
        self.statuses[status] += 1


@pytest.fixture(scope="module")
def api_schema(mortar_server: ServerProcess) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{mortar_server.base_url}/v1/openapi.json", timeout=10)


@pytest.fixture(scope="module")
def tally() -> Iterator[Tally]:
    counted = Tally()
    yield counted
    total = sum(counted.requests.values())
    elapsed = time.monotonic() - counted.started
    print(
        f"\nschemathesis: {total} requests in {elapsed:.1f} s: {dict(counted.requests)}, "
        f"statuses {dict(sorted(counted.statuses.items()))}"
    )


def test_the_document_declares_every_v1_operation(api_schema: schemathesis.BaseSchema) -> None:
    operations = {result.ok().label for result in api_schema.get_all_operations()}

    assert operations == {
        "POST /v1/chat/completions",
        "POST /v1/messages",
        "POST /v1/messages/count_tokens",
        "GET /v1/chat/completions/runs/{run_id}",
        "POST /v1/chat/completions/runs/{run_id}/rerun",
        "POST /v1/generations/{run_id}/stop",
        "GET /v1/models",
        "GET /v1/budget",
        "GET /v1/telemetry/stream",
    }
    assert {api_schema.find_operation_by_id(name).label for name in BUDGET} == operations


def bounded(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        # No shrinking: a failure is reported as found, and the run stays bounded.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def answer(case: schemathesis.Case, server: ServerProcess) -> int:
    """Send the case; check the answer is declared, and not a 5xx or a 422. Its status."""
    if case.operation.definition.raw["operationId"] != TELEMETRY_STREAM:
        response = case.call(base_url=server.base_url, timeout=60)
        assert response.status_code != 422, response.text[:500]
        case.validate_response(response, checks=CHECKS)
        return response.status_code
    # The live stream never ends: read its headers and first line, see that it stays open a
    # moment (a resume point the bus cannot read would end it), then hang up.
    declared = {int(status) for status in case.operation.definition.raw["responses"]}
    sent = case.as_transport_kwargs(base_url=server.base_url)
    with httpx.stream(
        sent["method"],
        sent["url"],
        params=sent.get("params"),
        headers=sent.get("headers"),
        timeout=httpx.Timeout(10, read=STREAM_OPEN_SECONDS),
    ) as response:
        assert response.status_code in declared, response.status_code
        if response.status_code != 200:
            response.read()
            case.validate_response(response, checks=CHECKS)
            return response.status_code
        assert EVENT_STREAM.match(response.headers["content-type"])
        lines = response.iter_lines()
        assert next(lines) == ": connected"
        try:
            for line in lines:  # events of other tests, perhaps; the stream must not end
                assert not line.startswith("data:") or line.startswith("data: {")
        except httpx.ReadTimeout:
            return response.status_code
        raise AssertionError("the live stream ended")


@pytest.mark.parametrize("operation_id", list(BUDGET))
def test_every_answer_is_declared_and_none_is_a_5xx_or_a_422(
    api_schema: schemathesis.BaseSchema,
    mortar_server: ServerProcess,
    tenant: Tenant,
    tally: Tally,
    operation_id: str,
) -> None:
    operation = api_schema.find_operation_by_id(operation_id)
    headers = {"Authorization": f"Bearer {tenant.secret}"}
    valid_or_not = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE, headers=headers),
        operation.as_strategy(GenerationMode.NEGATIVE, headers=headers),
    )

    @bounded(BUDGET[operation_id])
    @given(case=valid_or_not)
    def answer_is_declared(case: schemathesis.Case) -> None:
        tally.count(operation_id, answer(case, mortar_server))

    answer_is_declared()


def test_the_documents_examples_are_answered_as_declared(
    api_schema: schemathesis.BaseSchema, mortar_server: ServerProcess, tenant: Tenant, tally: Tally
) -> None:
    headers = {"Authorization": f"Bearer {tenant.secret}"}
    examples = [
        (operation_id, strategy)
        for operation_id in BUDGET
        for strategy in api_schema.get_strategies_from_examples(
            api_schema.find_operation_by_id(operation_id), headers=headers
        )
    ]
    answered: dict[str, list[int]] = {}

    @bounded(1)
    @given(data=st.data())
    def each_example_is_answered(data: st.DataObject) -> None:
        for operation_id, strategy in examples:
            status = answer(data.draw(strategy), mortar_server)
            tally.count(operation_id, status)
            answered.setdefault(operation_id, []).append(status)

    each_example_is_answered()

    # The documented example requests (and every example field) are valid: each gets its completion.
    assert len(answered["create_chat_completion"]) >= len(CHAT_REQUESTS)
    assert set(answered["create_chat_completion"]) == {200}
    assert len(answered["create_message"]) >= len(MESSAGES_REQUESTS)
    assert set(answered["create_message"]) == {200}
    assert set(answered["count_message_tokens"]) == {200}
    # The document's stop example names a generation that is not running here.
    assert answered["stop_generation"] == [404]
    assert answered["telemetry_stream"] == [200]
