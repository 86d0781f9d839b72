"""GET /metrics on a server that has served nothing: the series Mortar knows of are there at 0,
so an alert on them tells "none yet" from "missing"."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.models import CatalogModel, Deployment
from tests.conftest import _server_env
from tests.support.budgets import committed
from tests.support.servers import ServerProcess, start_mortar
from tests.support.upstreams import MockPair

pytestmark = pytest.mark.django_db

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
UPSTREAM_CODES = {
    "upstream_error",
    "upstream_unavailable",
    "upstream_timeout",
    "overloaded",
    "rate_limit_exceeded",
}


@pytest.fixture(scope="module")
def fresh_server(
    upstream_models: MockPair, budget_model: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A server of its own, with metrics of its own, that nothing has been sent to."""
    env = {
        **_server_env(),
        "MORTAR_VAR_DIR": str(tmp_path_factory.mktemp("fresh-var")),
        # Empty: not the directory this test process's own metrics (and other servers') use.
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path_factory.mktemp("fresh-metrics")),
    }
    server = start_mortar(env, log_dir=tmp_path_factory.mktemp("fresh-logs"))
    yield server
    server.stop()


def scrape(server: ServerProcess) -> Samples:
    response = httpx.get(f"{server.base_url}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_every_model_s_cost_and_tokens_and_every_deployment_s_errors_are_at_zero(
    fresh_server: ServerProcess, budget_model: str
) -> None:
    samples = scrape(fresh_server)

    models = set(CatalogModel.objects.values_list("id", flat=True))
    assert budget_model in models
    for model in models:
        assert samples[("mortar_cost_usd_total", frozenset({("model", model)}))] == 0.0
        for kind in ("prompt", "completion", "cached"):
            labels = frozenset({("model", model), ("kind", kind)})
            assert samples[("mortar_tokens_total", labels)] == 0.0
    forwarding = set(
        Deployment.objects.filter(kind=Deployment.Kind.UPSTREAM).values_list("name", flat=True)
    )
    assert {"mock-one", "mock-dead"} <= forwarding
    errors = {
        dict(labels)["deployment"]: set()
        for name, labels in samples
        if name == "mortar_upstream_errors_total"
    }
    for name, labels in samples:
        if name == "mortar_upstream_errors_total":
            assert samples[(name, labels)] == 0.0
            errors[dict(labels)["deployment"]].add(dict(labels)["code"])
    assert errors == {deployment: UPSTREAM_CODES for deployment in forwarding}
    # A scripted deployment never reaches a model server.
    assert "scripted" not in errors


def test_a_model_added_while_the_server_runs_is_at_zero_on_the_next_scrape(
    fresh_server: ServerProcess,
) -> None:
    scripted = Deployment.objects.get(name="scripted")
    committed(
        lambda: CatalogModel.objects.update_or_create(
            id="metrics-late-model", defaults={"deployment": scripted}
        )
    )
    try:
        samples = scrape(fresh_server)
        labels = frozenset({("model", "metrics-late-model")})
        assert samples[("mortar_cost_usd_total", labels)] == 0.0
    finally:
        committed(lambda: CatalogModel.objects.filter(id="metrics-late-model").delete())
