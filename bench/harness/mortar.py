"""A Mortar under test: its own database, Redis prefix, key and config, served as `make serve`
serves it — from the working tree, or from a baseline's checked-out tree."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .baseline import Baseline
from .constants import (
    BENCH_DB,
    LOAD_CORE,
    MODEL,
    MORTAR_ACCESS_LOG,
    PYTHON,
    ROOT,
    SERVER_CORE,
    UPSTREAM_MODEL,
)
from .processes import Processes, Started, base_env
from .stores import admin_database_url, database_url, recreate_database


@dataclass(frozen=True)
class MortarSource:
    """One Mortar to measure: the tree it runs from and what it gets of its own."""

    name: str  # "mortar" (the working tree), "mortar@<commit>", UNMETERED or TWO_WORKERS
    source: Path
    database: str
    redis_prefix: str
    # A budget and rate limits on the organization and on the key, all too large to refuse
    # anything: every request takes the checks' whole path.
    spend_control: bool = True
    workers: int = 1  # uvicorn's --workers
    cores: str = SERVER_CORE  # taskset's CPU list
    # The scenarios it is measured on; empty for all of them.
    scenarios: tuple[str, ...] = ()


# The working tree again, without budgets or rate limits: beside "mortar", what the checks
# cost. Both price the model — a priced run's cost is computed and stored whether or not a
# budget is set (that predates them), so it is not the checks' cost.
UNMETERED = "mortar@unmetered"

# The working tree again, as "mortar" but with two uvicorn workers on both cores — shared with
# the mock and the load generators, which the machine has no other cores for: beside "mortar",
# what a second worker adds. Measured on the throughput scenarios only.
TWO_WORKERS = "mortar@2-workers"
SCALING_SCENARIOS = ("json-32", "stream-32")


def mortar_sources(
    baseline: Baseline | None, *, unmetered: bool = False, two_workers: bool = False
) -> list[MortarSource]:
    """The working tree's Mortar, and the baseline's if there is one, or its unmetered twin;
    and with `two_workers`, the working tree served by two worker processes."""
    sources = [MortarSource("mortar", ROOT, BENCH_DB, _redis_prefix())]
    if baseline is not None:
        sources.append(
            MortarSource(
                baseline.target_name,
                baseline.source,
                f"{BENCH_DB}_at_{baseline.short}",
                _redis_prefix(),
                # A revision from before budgets would refuse the configuration's keys.
                spend_control=baseline.has_spend_control,
            )
        )
    elif unmetered:
        sources.append(
            MortarSource(UNMETERED, ROOT, f"{BENCH_DB}_unmetered", _redis_prefix(), False)
        )
    if two_workers:
        sources.append(
            MortarSource(
                TWO_WORKERS,
                ROOT,
                f"{BENCH_DB}_2_workers",
                _redis_prefix(),
                workers=2,
                cores=f"{SERVER_CORE},{LOAD_CORE}",
                scenarios=SCALING_SCENARIOS,
            )
        )
    return sources


def _redis_prefix() -> str:
    return f"mortar-bench-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class MortarSetup:
    """A prepared Mortar: its database migrated and configured, its key, its environment."""

    of: MortarSource
    secret: str  # its API key
    env: dict[str, str]

    @property
    def name(self) -> str:
        return self.of.name

    @property
    def database(self) -> str:
        return self.of.database

    @property
    def database_url(self) -> str:
        return database_url(self.of.database)


Launcher = Callable[[MortarSetup], list[str]]


def mortar_prepare(
    mortar: MortarSource, *, tmp: Path, mock_url: str, redis_url: str
) -> MortarSetup:
    """Create its database, migrate it, and apply a config with one deployment on the mock,
    one organization and one key."""
    print(
        f"{mortar.name}: database {mortar.database} (re-created), "
        f"Redis prefix {mortar.redis_prefix}",
        flush=True,
    )
    recreate_database(admin_database_url(), mortar.database)
    files = tmp / mortar.database
    files.mkdir()
    env = {
        **base_env(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": database_url(mortar.database),
        "REDIS_URL": redis_url,
        "MORTAR_REDIS_PREFIX": mortar.redis_prefix,
        "MORTAR_VAR_DIR": str(files / "var"),
        "SECRET_KEY": "bench-only-secret-key-" + secrets.token_hex(8),
    }
    if mortar.source != ROOT:
        # The venv's editable install maps Mortar's packages to the working tree, after the
        # path: the baseline's tree goes first on the path so its packages win (one it lacks
        # would still resolve to the working tree's, but it never imports those).
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(mortar.source), env.get("PYTHONPATH")) if p
        )
    _check_imports_from(mortar.source, env)
    setup = MortarSetup(mortar, "mk-bench-" + secrets.token_hex(16), env)
    _manage(setup, "migrate", "--noinput")
    config = files / "mortar-bench.yaml"
    config.write_text(bench_config(mock_url, spend_control=mortar.spend_control))
    _manage(setup, "applyconfig", str(config))
    _manage(
        setup,
        "createkey",
        "bench",
        "--name",
        "bench",
        "--secret",
        setup.secret,
        *(KEY_SPEND_CONTROL if mortar.spend_control else ()),
    )
    return setup


# Limits no measurement reaches (a day at 2,000 requests/s is 0.2 billion requests; the key's
# budget pays some 10 million requests at the prices below), so every request is checked,
# held, charged and counted, and none is refused.
KEY_SPEND_CONTROL = (
    "--budget-usd",
    "1000000",
    "--budget-period",
    "total",
    "--rpm",
    "1000000000",
    "--tpm",
    "2000000000",
)


def bench_config(mock_url: str, *, spend_control: bool) -> str:
    """The applyconfig YAML: one deployment on the mock, the priced model, the organization
    (with its budget and rate limits when `spend_control`)."""
    prices = "    prices: {input: 0.20, cached_input: 0.05, output: 0.60}\n"
    organization = (
        "    budget: {usd: 1000000, period: month}\n"
        "    rate_limits: {requests_per_minute: 1000000000, tokens_per_minute: 2000000000}\n"
    )
    return (
        "deployments:\n"
        "  - name: bench-mock\n"
        f"    upstreams: ['{mock_url}']\n"
        f"    upstream_model: {UPSTREAM_MODEL}\n"
        "models:\n"
        f"  - id: {MODEL}\n"
        "    deployment: bench-mock\n"
        "    context_window: 32768\n" + prices + "organizations:\n"
        "  - name: bench\n" + (organization if spend_control else "")
    )


def pinned(setup: MortarSetup) -> list[str]:
    """The command a Mortar is started under: pinned to its cores (the servers' core)."""
    return ["taskset", "-c", setup.of.cores]


def served_loop(source: Path) -> str:
    """uvicorn's `--loop` for Mortar at `source`: the Makefile's, Mortar's own loop
    (`core/http/event_loop.py`, since the accept fix), or uvloop for a baseline from before."""
    if (source / "core" / "http" / "event_loop.py").exists():
        return "core.http.event_loop:new_event_loop"
    return "uvloop"


def mortar_start(
    processes: Processes, setup: MortarSetup, port: int, launcher: Launcher = pinned
) -> Started:
    """As `make serve` runs it: uvicorn, uvloop, httptools, its workers (one but for
    TWO_WORKERS), no access log; under `launcher`'s command (taskset, or valgrind for
    bench/instructions.py)."""
    return processes.start(
        setup.name,
        [
            *launcher(setup),
            PYTHON,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--loop",
            served_loop(setup.of.source),
            "--http",
            "httptools",
            "--workers",
            str(setup.of.workers),
            *([] if MORTAR_ACCESS_LOG else ["--no-access-log"]),
        ],
        env=setup.env,
        cwd=setup.of.source,
    )


def _manage(setup: MortarSetup, *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=setup.of.source,
        env=setup.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{setup.name}: manage.py {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
        )
    return result.stdout


def _check_imports_from(source: Path, env: dict[str, str]) -> None:
    """Fail unless Mortar's packages import from `source` (not another tree) in this env."""
    packages = ("config", "gateway", "telemetry")
    probe = (
        f"import importlib\nfor name in {packages!r}: print(importlib.import_module(name).__file__)"
    )
    result = subprocess.run(
        [PYTHON, "-c", probe], cwd=source, env=env, capture_output=True, text=True, timeout=60
    )
    files = result.stdout.split()
    if (
        result.returncode != 0
        or not files
        or not all(Path(f).is_relative_to(source) for f in files)
    ):
        raise RuntimeError(
            f"Mortar's packages do not import from {source}:\n{result.stdout}{result.stderr}"
        )
