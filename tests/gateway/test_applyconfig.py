"""`manage.py applyconfig FILE.yaml`: declarative, idempotent configuration."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from accounts.models import Organization
from gateway.models import CatalogModel, Deployment

pytestmark = pytest.mark.django_db

ISSUE_EXAMPLE = """
deployments:
  - name: vllm-a
    upstreams: ["http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"]
    upstream_model: Qwen/Qwen2.5-7B-Instruct   # the name the model server expects
    api_key_env: VLLM_API_KEY                  # optional
models:
  - id: qwen-upstream                          # the name clients send
    deployment: vllm-a
    context_window: 32768
organizations:
  - name: acme
"""


def apply(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mortar.yaml"
    path.write_text(text)
    out = StringIO()
    call_command("applyconfig", str(path), stdout=out)
    return out.getvalue()


def test_the_documented_example_applies_as_written(tmp_path: Path) -> None:
    out = apply(tmp_path, ISSUE_EXAMPLE)
    deployment = Deployment.objects.get(name="vllm-a")
    assert deployment.kind == "upstream"
    assert deployment.upstreams == ["http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"]
    assert deployment.upstream_model == "Qwen/Qwen2.5-7B-Instruct"
    assert deployment.api_key_env == "VLLM_API_KEY"
    assert deployment.stream_default is True
    model = CatalogModel.objects.get(id="qwen-upstream")
    assert (model.deployment_id, model.context_window, model.deployed) == (
        deployment.id,
        32768,
        True,
    )
    assert Organization.objects.filter(name="acme").exists()
    assert out.splitlines() == [
        "created deployment vllm-a",
        "created model qwen-upstream",
        "created organization acme",
    ]


def test_applying_twice_changes_nothing_more(tmp_path: Path) -> None:
    apply(tmp_path, ISSUE_EXAMPLE)
    counts = (
        Deployment.objects.count(),
        CatalogModel.objects.count(),
        Organization.objects.count(),
    )
    out = apply(tmp_path, ISSUE_EXAMPLE)
    assert (
        Deployment.objects.count(),
        CatalogModel.objects.count(),
        Organization.objects.count(),
    ) == counts
    assert "updated deployment vllm-a" in out and "updated organization acme" in out


def test_a_changed_file_updates_in_place(tmp_path: Path) -> None:
    apply(tmp_path, ISSUE_EXAMPLE)
    apply(
        tmp_path,
        ISSUE_EXAMPLE.replace("32768", "8192").replace(
            '"http://127.0.0.1:9002/v1"', '"http://127.0.0.1:9003/v1"'
        ),
    )
    assert CatalogModel.objects.get(id="qwen-upstream").context_window == 8192
    assert Deployment.objects.get(name="vllm-a").upstreams[1] == "http://127.0.0.1:9003/v1"


def test_timeouts_and_the_stream_default_are_read(tmp_path: Path) -> None:
    apply(
        tmp_path,
        """
deployments:
  - name: slow
    upstreams: ["http://127.0.0.1:9001/v1/"]
    stream: false
    timeouts: {connect: 1.5, first_byte: 30, between_chunks: 20, total: 300}
""",
    )
    deployment = Deployment.objects.get(name="slow")
    assert deployment.upstreams == ["http://127.0.0.1:9001/v1"]
    assert deployment.stream_default is False
    assert (
        deployment.connect_timeout_s,
        deployment.first_byte_timeout_s,
        deployment.chunk_timeout_s,
        deployment.total_timeout_s,
    ) == (1.5, 30, 20, 300)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("deployments: [{name: x, upstreams: [ftp://nope]}]", r"not an http\(s\) base URL"),
        ("models: [{id: m, deployment: nowhere}]", "unknown deployment 'nowhere'"),
        ("deployments: [{name: x, colour: red}]", "colour: Extra inputs are not permitted"),
        ("deployments: [{name: x, timeouts: {connect: -1}}]", "timeouts.connect"),
        ("deployments: {name: [", "not valid YAML"),
    ],
    ids=["bad-url", "unknown-deployment", "unknown-key", "negative-timeout", "bad-yaml"],
)
def test_a_bad_file_is_refused_with_where_and_why(tmp_path: Path, text: str, message: str):
    with pytest.raises(CommandError, match=message):
        apply(tmp_path, text)
    assert not Deployment.objects.filter(name="x").exists()


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("applyconfig", str(tmp_path / "nope.yaml"))


def test_prices_optimizer_mode_and_retention_are_applied(tmp_path: Path) -> None:
    apply(
        tmp_path,
        """
deployments:
  - name: opt
    upstreams: ["http://127.0.0.1:9001/v1"]
    optimizer: "on"
models:
  - id: priced
    deployment: opt
    prices: {input: 0.20, cached_input: 0.05, output: 0.60}
organizations:
  - name: private-co
    retention: metadata
    retention_days: 7
    optimize_default: "off"
    finish_chunk_delta: true
""",
    )
    assert Deployment.objects.get(name="opt").optimizer_mode == "on"
    model = CatalogModel.objects.get(id="priced")
    assert (str(model.price_input), str(model.price_cached_input), str(model.price_output)) == (
        "0.200000",
        "0.050000",
        "0.600000",
    )
    organization = Organization.objects.get(name="private-co")
    assert (organization.retention, organization.retention_days, organization.optimize_default) == (
        "metadata",
        7,
        "off",
    )
    assert organization.finish_chunk_delta is True


def test_an_organization_s_budget_and_rate_limits_are_applied_and_cleared(tmp_path: Path) -> None:
    apply(
        tmp_path,
        "organizations:\n"
        "  - name: acme\n"
        "    budget: {usd: 25.00, period: month}\n"
        "    rate_limits: {requests_per_minute: 600, tokens_per_minute: 200000}\n",
    )
    acme = Organization.objects.get(name="acme")
    assert (acme.budget_usd, acme.budget_period) == (Decimal("25.000000"), "month")
    assert (acme.requests_per_minute, acme.tokens_per_minute) == (600, 200000)

    apply(tmp_path, "organizations:\n  - name: acme\n    budget: {usd: 0.000123, period: day}\n")
    acme.refresh_from_db()
    assert (acme.budget_usd, acme.budget_period) == (Decimal("0.000123"), "day")
    # What the file leaves out is no limit.
    assert (acme.requests_per_minute, acme.tokens_per_minute) == (None, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("budget: {usd: -1}", "budget.usd"),
        ("budget: {usd: 0.0000001}", "budget.usd"),
        ("budget: {usd: 5, period: week}", "budget.period"),
        ("rate_limits: {requests_per_minute: 0}", "rate_limits.requests_per_minute"),
        ("rate_limits: {tokens_per_hour: 5}", "tokens_per_hour"),
    ],
    ids=["negative", "below-a-micro-dollar", "unknown-period", "zero-rpm", "unknown-key"],
)
def test_a_bad_budget_or_limit_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        apply(tmp_path, f"organizations:\n  - name: acme\n    {text}\n")
    assert not Organization.objects.filter(name="acme").exists()
