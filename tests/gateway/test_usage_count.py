"""Usage counted by the model server: a reply whose stream reported no usage, on a deployment
with `usage_count`, is billed on the counts of the model server's own counting endpoint (the mock
speaks vLLM's, llama.cpp's and llama-cpp-python's), asked after the response."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from django.core.exceptions import ValidationError

from gateway.catalog.config_file import ConfigError, parse_config
from gateway.models import Deployment
from mockmodel.tokens import MOCK_SYSTEM_PROMPT, mock_tokens
from tests.conftest import Tenant, manage, wait_for_run
from tests.support.servers import ServerProcess, start_mock_model

pytestmark = pytest.mark.django_db

# A template that writes the model's BOS token, which Mortar cannot spell: counted as one token.
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "[{{ message['role'] }}] {{ message['content'] }}\n{% endfor %}"
)
CONFIG = """
deployments:
  - name: count-vllm
    upstreams: ["{url}"]
    upstream_model: counted-model
    usage_count: vllm
  - name: count-llama-cpp
    upstreams: ["{url}"]
    usage_count: llama.cpp
  - name: count-llama-cpp-python
    upstreams: ["{url}"]
    usage_count: llama-cpp-python
    chat_template: "{template}"
  - name: count-chatml
    upstreams: ["{url}"]
    usage_count: llama-cpp-python
  - name: count-refused
    upstreams: ["{url}"]
    usage_count: llama-cpp-python
    chat_template: "{{{{ raise_exception('no conversation pleases this template') }}}}"
  - name: count-none
    upstreams: ["{url}"]
models:
  - {{id: count-vllm, deployment: count-vllm}}
  - {{id: count-llama-cpp, deployment: count-llama-cpp}}
  - {{id: count-llama-cpp-python, deployment: count-llama-cpp-python}}
  - {{id: count-chatml, deployment: count-chatml}}
  - {{id: count-refused, deployment: count-refused}}
  - {{id: count-none, deployment: count-none}}
"""


@pytest.fixture(scope="module")
def counting_mock(
    mortar_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A mock model server of these tests' own, and deployments on it that count upstream."""
    mock = start_mock_model(log_dir=tmp_path_factory.mktemp("counting-mock"))
    config = Path(tmp_path_factory.mktemp("config")) / "counting.yaml"
    template = TEMPLATE.replace("\n", "\\n")
    config.write_text(CONFIG.format(url=f"{mock.base_url}/v1", template=template))
    manage("applyconfig", str(config))
    yield mock
    mock.stop()


@pytest.fixture
def mock(counting_mock: ServerProcess) -> ServerProcess:
    httpx.delete(f"{counting_mock.base_url}/_mock/requests")
    httpx.post(f"{counting_mock.base_url}/_mock/config", json={})
    return counting_mock


def counts(mock: ServerProcess) -> list[dict]:
    return httpx.get(f"{mock.base_url}/_mock/counts").json()


def chat(
    server: ServerProcess, tenant: Tenant, model: str, text: str, *, stream: bool = True
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(
            {"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]}
        ),
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )


def chatml_with_system_prompt(text: str) -> str:
    return (
        f"<|im_start|>system\n{MOCK_SYSTEM_PROMPT}<|im_end|>\n"
        f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    )


REPLY = "tok0 tok1 tok2 tok3 tok4"  # five tokens to the mock's tokenizer, as it reports them


def test_a_stream_without_usage_is_billed_on_vllms_count_of_the_templated_prompt(
    mortar_server: ServerProcess, tenant: Tenant, mock: ServerProcess
) -> None:
    text = "Count me, please. [mock usage=0 chunks=5]"
    response = chat(mortar_server, tenant, "count-vllm", text)
    assert response.status_code == 200
    run = wait_for_run(run_id_of(response))
    prompt = len(mock_tokens(chatml_with_system_prompt(text)))
    assert run.usage_source == "upstream_count"
    assert (run.prompt_tokens, run.completion_tokens, run.total_tokens) == (prompt, 5, prompt + 5)
    assert run.usage == {
        "prompt_tokens": prompt,
        "completion_tokens": 5,
        "total_tokens": prompt + 5,
    }
    assert counts(mock) == [
        {
            "path": "/tokenize",
            "body": {
                "model": "counted-model",
                "messages": [{"role": "user", "content": text}],
                "add_generation_prompt": True,
            },
        },
        {
            "path": "/tokenize",
            "body": {"model": "counted-model", "prompt": REPLY, "add_special_tokens": False},
        },
    ]


def run_id_of(response: httpx.Response) -> str:
    """The run id: the `id` of the stream's first chunk, or of the JSON body."""
    if response.headers["Content-Type"].startswith("application/json"):
        return str(response.json()["id"])
    first = response.text.split("\n\n", 1)[0].removeprefix("data: ")
    return str(orjson.loads(first)["id"])


def test_llama_cpp_applies_its_template_then_tokenizes_with_its_bos(
    mortar_server: ServerProcess, tenant: Tenant, mock: ServerProcess
) -> None:
    text = "And me. [mock usage=0 chunks=5]"
    response = chat(mortar_server, tenant, "count-llama-cpp", text)
    run = wait_for_run(run_id_of(response))
    templated = chatml_with_system_prompt(text)
    assert run.usage_source == "upstream_count"
    assert (run.prompt_tokens, run.completion_tokens) == (1 + len(mock_tokens(templated)), 5)
    assert [(count["path"], count["body"]) for count in counts(mock)] == [
        ("/apply-template", {"messages": [{"role": "user", "content": text}]}),
        ("/tokenize", {"content": templated, "add_special": True, "parse_special": True}),
        ("/tokenize", {"content": REPLY, "add_special": False, "parse_special": False}),
    ]


def test_llama_cpp_python_counts_the_conversation_rendered_with_the_deployments_template(
    mortar_server: ServerProcess, tenant: Tenant, mock: ServerProcess
) -> None:
    text = "Render me. [mock usage=0 chunks=5]"
    response = chat(mortar_server, tenant, "count-llama-cpp-python", text)
    run = wait_for_run(run_id_of(response))
    rendered = f"[user] {text}\n"
    # The template's BOS is one token; the BOS the endpoint adds to any text is not counted.
    assert run.usage_source == "upstream_count"
    assert (run.prompt_tokens, run.completion_tokens) == (1 + len(mock_tokens(rendered)), 5)
    model = "count-llama-cpp-python"  # no upstream_model: the catalog's name is sent
    assert [count["body"] for count in counts(mock)] == [
        {"model": model, "input": ""},
        {"model": model, "input": rendered},
        {"model": model, "input": REPLY},
    ]


def test_llama_cpp_python_without_a_template_counts_chatml(
    mortar_server: ServerProcess, tenant: Tenant, mock: ServerProcess
) -> None:
    text = "Plain. [mock usage=0 chunks=5]"
    run = wait_for_run(run_id_of(chat(mortar_server, tenant, "count-chatml", text, stream=False)))
    chatml = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    assert run.usage_source == "upstream_count"
    assert (run.prompt_tokens, run.completion_tokens) == (len(mock_tokens(chatml)), 5)


def test_a_reply_with_usage_is_billed_on_it_and_nothing_is_counted(
    mortar_server: ServerProcess, tenant: Tenant, mock: ServerProcess
) -> None:
    response = chat(mortar_server, tenant, "count-vllm", "Reported. [mock chunks=5]")
    run = wait_for_run(run_id_of(response))
    assert run.usage_source == "upstream"
    assert run.completion_tokens == 5
    assert counts(mock) == []


def test_a_deployment_without_usage_count_keeps_mortars_estimate(
    mortar_server: ServerProcess, tenant: Tenant, mock: ServerProcess
) -> None:
    response = chat(mortar_server, tenant, "count-none", "Estimated. [mock usage=0 chunks=5]")
    run = wait_for_run(run_id_of(response))
    assert run.usage_source == "estimate"
    assert counts(mock) == []


def test_a_count_that_fails_leaves_the_run_on_mortars_estimate(
    mortar_server: ServerProcess, tenant: Tenant, mock: ServerProcess
) -> None:
    response = chat(mortar_server, tenant, "count-refused", "Refused. [mock usage=0 chunks=5]")
    assert response.status_code == 200
    run = wait_for_run(run_id_of(response))
    assert run.status == "completed"
    assert run.usage_source == "estimate"
    assert run.completion_tokens is not None and run.completion_tokens > 0


def test_a_slow_count_does_not_delay_the_response_and_the_run_waits_for_it(
    mortar_server: ServerProcess, tenant: Tenant, mock: ServerProcess
) -> None:
    httpx.post(f"{mock.base_url}/_mock/config", json={"count_delay_ms": 2000})
    for stream in (True, False):
        started = time.monotonic()
        response = chat(mortar_server, tenant, "count-vllm", "Slow. [mock usage=0]", stream=stream)
        answered = time.monotonic() - started
        assert response.status_code == 200
        assert answered < 1.5, f"the response waited {answered:.2f}s for the count"
        run = wait_for_run(run_id_of(response))
        assert time.monotonic() - started >= 2.0  # closed only once the count came back
        assert run.usage_source == "upstream_count"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("usage_count: tiktoken", "deployments[d].usage_count"),
        ("chat_template: '{% for m in messages %}'", "the chat template is not valid Jinja"),
    ],
)
def test_applyconfig_refuses_an_unknown_counter_or_a_broken_template(
    entry: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_config(f"deployments:\n  - name: d\n    {entry}\n")


def test_the_admin_refuses_a_broken_chat_template() -> None:
    deployment = Deployment(name="d", chat_template="{{ messages")
    with pytest.raises(ValidationError) as refused:
        deployment.clean()
    assert list(refused.value.message_dict) == ["chat_template"]
    Deployment(name="d", chat_template=TEMPLATE).clean()  # a good one passes


def test_a_stream_the_client_left_is_billed_on_the_count_of_what_was_generated(
    mortar_server: ServerProcess, tenant: Tenant, mock: ServerProcess
) -> None:
    body = {
        "model": "count-vllm",
        "stream": True,
        "messages": [{"role": "user", "content": "Leave. [mock usage=0 chunks=200 delay_ms=20]"}],
    }
    with httpx.stream(
        "POST",
        f"{mortar_server.base_url}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    ) as response:
        run_id = response.headers["X-Mortar-Run-Id"]
        lines = response.iter_lines()
        for _ in range(5):
            next(lines)
    run = wait_for_run(run_id)
    assert run.status == "cancelled"
    assert run.usage_source == "upstream_count"
    replies = [count["body"] for count in counts(mock) if "prompt" in count["body"]]
    assert len(replies) == 1
    assert 0 < run.completion_tokens == len(mock_tokens(replies[0]["prompt"])) < 200
