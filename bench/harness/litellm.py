"""The LiteLLM proxy: its own venv under bench/, one worker, a master key, no database."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .constants import (
    LITELLM_BIN,
    LITELLM_MASTER_KEY,
    LITELLM_VENV,
    MODEL,
    SERVER_CORE,
    UPSTREAM_MODEL,
)
from .processes import Processes, Started, base_env


def ensure_litellm() -> None:
    """The LiteLLM proxy in its own virtual environment (bench/.litellm-venv, gitignored)."""
    if LITELLM_BIN.exists():
        return
    print("Installing the LiteLLM proxy into bench/.litellm-venv (about a minute) …", flush=True)
    base_python = getattr(sys, "_base_executable", None) or shutil.which("python3") or "python3"
    subprocess.run([base_python, "-m", "venv", str(LITELLM_VENV)], check=True, timeout=300)
    pip = str(LITELLM_VENV / "bin" / "pip")
    subprocess.run([pip, "install", "-q", "--upgrade", "pip"], check=True, timeout=600)
    subprocess.run([pip, "install", "-q", "litellm[proxy]"], check=True, timeout=1200)


def litellm_start(processes: Processes, tmp: Path, mock_url: str, port: int) -> Started:
    """Forwarding MODEL to the mock, pinned to the servers' core, as its CLI ships."""
    config = tmp / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{UPSTREAM_MODEL}\n"
        f"      api_base: {mock_url}\n"
        "      api_key: mock-needs-no-key\n"
        "general_settings:\n"
        f"  master_key: {LITELLM_MASTER_KEY}\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )
    return processes.start(
        "litellm",
        [
            "taskset",
            "-c",
            SERVER_CORE,
            str(LITELLM_BIN),
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            "1",
        ],
        env={
            **base_env(),
            # No network: use the cost map shipped in the wheel; no usage telemetry.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
        },
        cwd=tmp,
    )
