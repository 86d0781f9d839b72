"""Where the benchmark's files live and the fixed rules of every run: cores, model, request."""

from __future__ import annotations

import sys
from pathlib import Path

HARNESS = Path(__file__).resolve().parent
BENCH = HARNESS.parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
LOGS = RESULTS / "logs"
PYTHON = sys.executable
LITELLM_VENV = BENCH / ".litellm-venv"
LITELLM_BIN = LITELLM_VENV / "bin" / "litellm"

# `make serve` runs uvicorn without its access log since f065a06 (every request is a stored
# run); LiteLLM's CLI keeps its access log on, as it ships.
MORTAR_ACCESS_LOG = False
SERVER_CORE = "0"  # Mortar and LiteLLM
LOAD_CORE = "1"  # the mock, the load generators, this script
BENCH_DB = "mortar_bench_gateway"  # the writer's benchmark uses mortar_bench
MODEL = "bench-model"
UPSTREAM_MODEL = "mock-model"
LITELLM_MASTER_KEY = "sk-bench-" + "litellm-master-key"
CHUNKS = 20
SLOW_DELAY_MS = 50
SLOW_RAMP_S = 3.0  # the slow streams open over this long, then all run at once
SYSTEM = "You are a concise assistant for an inference platform."
QUESTION = "What does max_tokens limit?"

QUIET_CPU_SHARE = 0.05  # a server is quiet below 5% of a core
QUIET_TIMEOUT_S = 90.0
