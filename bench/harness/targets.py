"""The targets under load — `direct` (the mock itself), Mortar, Mortar at a baseline, LiteLLM —
and starting all of them for one run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .constants import CHUNKS, LITELLM_MASTER_KEY, LOAD_CORE, MODEL, PYTHON
from .litellm import litellm_start
from .mortar import Launcher, MortarSetup, MortarSource, mortar_prepare, mortar_start, pinned
from .processes import Processes, Started, base_env, free_port, wait_http
from .scenarios import CHAT, MESSAGES, PATHS, Scenario
from .stores import redis_url

# The order of the table's columns; a baseline's "mortar@<commit>" follows "mortar".
KINDS = ("direct", "mortar", "litellm")


def target_kind(name: str) -> str:
    """What a target is ("direct", "mortar" or "litellm"), whatever revision it runs."""
    return name.partition("@")[0]


def ordered(names: list[str]) -> list[str]:
    """Target names in the table's order: direct, mortar, mortar@<commit>, litellm."""
    return sorted(set(names), key=lambda n: (KINDS.index(target_kind(n)), "@" in n, n))


@dataclass
class Target:
    name: str
    url: str  # the chat completions URL
    auth: str
    model: str
    server: Started | None  # the gateway's process (None for direct)
    base: str = ""  # the server's root URL
    mortar: MortarSetup | None = None  # a Mortar's database, Redis prefix and environment
    # The API surfaces it serves: chat completions, and Messages for Mortar.
    surfaces: set[str] = field(default_factory=lambda: {CHAT})

    @property
    def kind(self) -> str:
        return target_kind(self.name)

    def url_for(self, scenario: Scenario) -> str:
        """Where `scenario`'s requests go: the URL of its surface's route."""
        return self.url if scenario.surface == CHAT else self.base + PATHS[scenario.surface]

    def measured_on(self, scenario: Scenario) -> bool:
        """Whether this target is measured on `scenario`: it serves its surface, and it is not a
        Mortar measured on a few scenarios only."""
        only = self.mortar.of.scenarios if self.mortar is not None else ()
        return scenario.surface in self.surfaces and (not only or scenario.name in only)


@dataclass
class Bench:
    tmp: Path
    mock: Started
    redis_url: str
    targets: dict[str, Target]

    def gateways(self) -> list[Target]:
        return [t for t in self.targets.values() if t.server is not None]

    def mortars(self) -> list[Target]:
        return [t for t in self.targets.values() if t.mortar is not None]

    def databases(self) -> list[str]:
        return [t.mortar.database for t in self.mortars() if t.mortar is not None]


def start_everything(
    processes: Processes,
    tmp: Path,
    *,
    mortars: list[MortarSource],
    litellm: bool,
    launcher: Launcher = pinned,
    startup_timeout: float = 60,
) -> Bench:
    """Prepare each Mortar's database, start the mock, the gateways (each Mortar under
    `launcher`'s command), and wait for all."""
    redis = redis_url()
    mock_port = free_port()
    mock_url = f"http://127.0.0.1:{mock_port}/v1"
    setups = [
        mortar_prepare(mortar, tmp=tmp, mock_url=mock_url, redis_url=redis) for mortar in mortars
    ]

    mock = processes.start(
        "mock",
        [
            "taskset",
            "-c",
            LOAD_CORE,
            PYTHON,
            "-m",
            "mockmodel",
            "--host",
            "127.0.0.1",
            "--port",
            str(mock_port),
            "--chunks",
            str(CHUNKS),
        ],
        env=base_env(),
    )
    targets = {"direct": Target("direct", f"{mock_url}/chat/completions", "", MODEL, None)}
    for setup in setups:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = mortar_start(processes, setup, port, launcher)
        targets[setup.name] = Target(
            setup.name,
            base + PATHS[CHAT],
            setup.secret,
            MODEL,
            server,
            base,
            setup,
            surfaces={CHAT, MESSAGES},
        )
    if litellm:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = litellm_start(processes, tmp, mock_url, port)
        targets["litellm"] = Target(
            "litellm", base + PATHS[CHAT], LITELLM_MASTER_KEY, MODEL, server, base
        )

    wait_http(f"http://127.0.0.1:{mock_port}/healthz", mock, 30)
    for target in targets.values():
        if target.mortar is not None and target.server is not None:
            wait_http(f"{target.base}/healthz", target.server, startup_timeout)
    if "litellm" in targets and targets["litellm"].server is not None:
        wait_http(f"{targets['litellm'].base}/health/liveliness", targets["litellm"].server, 180)
    return Bench(tmp=tmp, mock=mock, redis_url=redis, targets=targets)
