"""A deployment's extra request fields: what vLLM takes beyond OpenAI's API, forwarded as sent.

Through the OpenAI SDK's `extra_body`, to the mock vLLM server as a real process: the listed
fields arrive exactly as the client sent them and are stored with the run's upstream request;
unlisted ones, and every field on a deployment that lists none, never leave Mortar.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import openai
import orjson
import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from gateway.models import Deployment
from tests.conftest import Tenant, manage, wait_for_run
from tests.support.servers import ServerProcess
from tests.support.upstreams import MockPair, mock_requests, mock_reset

pytestmark = pytest.mark.django_db

VLLM_FIELDS = [
    "top_k",
    "min_p",
    "repetition_penalty",
    "logit_bias",
    "structured_outputs",
    "guided_json",
]
CONFIG = """
deployments:
  - name: mock-extras
    upstreams: ["{a}"]
    upstream_model: mock-upstream-name
    extra_fields: [top_k, min_p, repetition_penalty, logit_bias, structured_outputs, guided_json]
  - name: mock-no-extras
    upstreams: ["{a}"]
    upstream_model: mock-upstream-name
models:
  - id: extras-model
    deployment: mock-extras
  - id: no-extras-model
    deployment: mock-no-extras
"""
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
SENT = {
    "top_k": 20,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "logit_bias": {"50256": -100},
    "structured_outputs": {"json": SCHEMA},
    "guided_json": SCHEMA,
    "ignore_eos": True,  # a vLLM field the deployment does not list
}


@pytest.fixture(scope="module")
def extras(mock_pair: MockPair, mortar_server: ServerProcess, tmp_path_factory) -> MockPair:
    """The two deployments on the first mock server, applied through `applyconfig`."""
    config = Path(tmp_path_factory.mktemp("extras")) / "extras.yaml"
    config.write_text(CONFIG.format(a=MockPair.url(mock_pair.a)))
    manage("applyconfig", str(config))
    return mock_pair


@pytest.fixture
def client(mortar_server: ServerProcess, tenant: Tenant) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{mortar_server.base_url}/v1", api_key=tenant.secret, max_retries=0
    )


def ask(client: openai.OpenAI, model: str, extra_body: dict) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "Hello there"}],
        max_tokens=20,
        extra_body=extra_body,
    )
    raw.parse()
    return raw.headers["X-Mortar-Run-Id"]


def test_listed_fields_reach_the_model_server_as_sent_and_are_stored(
    client: openai.OpenAI, extras: MockPair
) -> None:
    mock_reset(extras.a)
    run_id = ask(client, "extras-model", SENT)

    [arrived] = mock_requests(extras.a)
    body = arrived["body"]
    assert {name: body[name] for name in VLLM_FIELDS} == {name: SENT[name] for name in VLLM_FIELDS}
    assert "ignore_eos" not in body
    assert body["max_tokens"] == 20  # Mortar's own fields are still Mortar's
    assert body["model"] == "mock-upstream-name"
    run = wait_for_run(run_id)
    assert run.deployment == "mock-extras"
    stored = orjson.loads(bytes(run.upstream_request))
    assert stored == body


def test_a_deployment_that_lists_none_forwards_none(
    client: openai.OpenAI, extras: MockPair
) -> None:
    mock_reset(extras.a)
    run_id = ask(client, "no-extras-model", SENT)

    [arrived] = mock_requests(extras.a)
    assert not set(SENT) & set(arrived["body"])
    assert not set(SENT) & set(orjson.loads(bytes(wait_for_run(run_id).upstream_request)))


def test_a_listed_field_sent_as_null_is_left_out(client: openai.OpenAI, extras: MockPair) -> None:
    mock_reset(extras.a)
    ask(client, "extras-model", {"top_k": None, "min_p": 0.1})

    [arrived] = mock_requests(extras.a)
    assert "top_k" not in arrived["body"]
    assert arrived["body"]["min_p"] == 0.1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("[max_tokens]", "'max_tokens' is a field Mortar reads and forwards itself"),
        ("[top_k, top_k]", "a field is listed twice"),
        ('["top k"]', "is not a field name"),
    ],
)
def test_applyconfig_refuses_fields_it_cannot_forward_as_sent(
    tmp_path: Path, fields: str, message: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "deployments:\n  - name: bad-extras\n    upstreams: [http://127.0.0.1:9/v1]\n"
        f"    extra_fields: {fields}\n"
    )
    with pytest.raises(CommandError, match=message):
        call_command("applyconfig", str(config), stdout=StringIO())
    assert not Deployment.objects.filter(name="bad-extras").exists()


def test_the_admin_s_check_refuses_the_same() -> None:
    deployment = Deployment(
        name="admin-extras", kind=Deployment.Kind.UPSTREAM, upstreams=["http://127.0.0.1:9/v1"]
    )
    deployment.extra_fields = ["top_k", "stream"]
    with pytest.raises(ValidationError, match="'stream' is a field Mortar reads"):
        deployment.full_clean()
    deployment.extra_fields = ["top_k", "min_p"]
    deployment.full_clean()
