"""Fixtures for forwarding tests: mock model servers as real processes, and deployments on them
applied with `manage.py applyconfig`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ServerProcess, free_port, start_mock_model


@dataclass(frozen=True)
class MockPair:
    a: ServerProcess
    b: ServerProcess

    @staticmethod
    def url(server: ServerProcess) -> str:
        return f"{server.base_url}/v1"


def mock_requests(server: ServerProcess) -> list[dict]:
    return httpx.get(f"{server.base_url}/_mock/requests").json()


def mock_stats(server: ServerProcess) -> dict[str, int]:
    return httpx.get(f"{server.base_url}/_mock/stats").json()


def mock_reset(*servers: ServerProcess) -> None:
    for server in servers:
        httpx.delete(f"{server.base_url}/_mock/requests")


@pytest.fixture(scope="session")
def mock_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockPair]:
    log_dir = tmp_path_factory.mktemp("mocks")
    a = start_mock_model(log_dir=log_dir)
    b = start_mock_model(log_dir=log_dir)
    yield MockPair(a=a, b=b)
    a.stop()
    b.stop()


UPSTREAM_CONFIG = """
deployments:
  - name: mock-pair
    upstreams: ["{a}", "{b}"]
    upstream_model: Qwen/Qwen2.5-7B-Instruct
  - name: mock-one
    upstreams: ["{a}"]
    upstream_model: mock-upstream-name
    api_key_env: MOCK_UPSTREAM_KEY
    timeouts: {{connect: 2, first_byte: 2, between_chunks: 1.5, total: 6}}
  - name: mock-patient
    upstreams: ["{a}"]
    upstream_model: mock-upstream-name
    timeouts: {{connect: 2, first_byte: 10, between_chunks: 10, total: 20}}
  - name: mock-dead
    upstreams: ["{dead}"]
    timeouts: {{connect: 2}}
  - name: mock-dead-first
    upstreams: ["{dead}", "{a}"]
models:
  - id: pair-model
    deployment: mock-pair
    context_window: 32768
  - id: mock-one
    deployment: mock-one
  - id: mock-patient
    deployment: mock-patient
  - id: mock-dead
    deployment: mock-dead
  - id: mock-dead-first
    deployment: mock-dead-first
organizations:
  - name: acme-tests
"""


@pytest.fixture(scope="session")
def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there


@pytest.fixture(scope="session")
def upstream_models(
    mock_pair: MockPair, dead_url: str, mortar_server: ServerProcess, tmp_path_factory
) -> MockPair:
    """Deployments on the mock servers, applied through the real `applyconfig` command."""
    from tests.conftest import manage

    config = Path(tmp_path_factory.mktemp("config")) / "upstreams.yaml"
    config.write_text(
        UPSTREAM_CONFIG.format(
            a=MockPair.url(mock_pair.a), b=MockPair.url(mock_pair.b), dead=dead_url
        )
    )
    manage("applyconfig", str(config))
    return mock_pair
