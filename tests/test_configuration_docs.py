"""docs/configuration.md documents every setting the code reads, and nothing the code no longer
reads: environment variables found by walking Mortar's Python (and the Makefile and the compose
file), `applyconfig` keys found in the file's pydantic schema."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from gateway.catalog.config_file import ConfigFile, OrganizationEntry, parse_config
from tests.support.configuration import (
    PAGE,
    ROOT,
    data_keys,
    environment_reads,
    makefile_variables,
    schema_keys,
    undocumented,
    unread,
    variables_read,
)

PLANTED = "MORTAR_PLANTED_SETTING"


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text()


@pytest.fixture(scope="module")
def reads() -> dict[str, set[str]]:
    """Every environment variable the repository reads, with what reads it."""
    return variables_read()


def test_every_environment_variable_read_has_a_row(page: str, reads: dict[str, set[str]]) -> None:
    # Each way of reading is seen: os.environ.get, a settings helper, a module constant,
    # setdefault, the Makefile and the compose file.
    assert {
        "DATABASE_URL",
        "MORTAR_SIGNIN_FAILURE_LIMIT",
        "PROMETHEUS_MULTIPROC_DIR",
        "MORTAR_TEST_BACKENDS",
        "PYTEST_ARGS",
        "POSTGRES_PASSWORD",
    } <= set(reads)
    missing = undocumented(reads, page)
    assert not missing, {name: sorted(reads[name]) for name in sorted(missing)}


def test_every_applyconfig_key_has_a_row(page: str) -> None:
    keys = schema_keys(ConfigFile)
    assert {"organizations[].budget.usd", "deployments[].timeouts.total"} <= keys
    assert undocumented(keys, page) == set()


def test_every_row_names_a_setting_something_reads(page: str, reads: dict[str, set[str]]) -> None:
    assert unread(page, variables=reads, keys=schema_keys(ConfigFile)) == set()


def test_the_example_file_is_valid_and_uses_every_key(page: str) -> None:
    section = page.split("## The `applyconfig` file", 1)[1]
    example = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert example is not None
    parse_config(example.group(1))  # raises ConfigError, saying what is wrong
    assert data_keys(yaml.safe_load(example.group(1))) == schema_keys(ConfigFile)


@pytest.mark.parametrize(
    "source",
    [
        f'os.environ.get("{PLANTED}")',
        f'os.environ["{PLANTED}"]',
        f'os.getenv("{PLANTED}", "1")',
        f'os.environ.setdefault("{PLANTED}", "1")',
        f'"{PLANTED}" in os.environ',
        f'env_int("{PLANTED}", 5)',  # config/settings.py's helper
        f'NAME = "{PLANTED}"\nos.environ.get(NAME, "")',
    ],
)
def test_a_setting_added_without_a_row_is_reported(
    tmp_path: Path, page: str, reads: dict[str, set[str]], source: str
) -> None:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    planted = tmp_path / "gateway" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(f"import os\n\nfrom config.settings import env_int\n\n{source}\n")

    planted_reads = environment_reads(tmp_path)

    assert planted_reads[PLANTED] == {"gateway/planted.py"}
    assert "DATABASE_URL" in planted_reads  # the copy of config/ is read too
    # The one setting the page lacks beyond any the repository itself already lacks.
    assert undocumented(planted_reads, page) - undocumented(reads, page) == {PLANTED}


def test_reads_in_tests_migrations_and_bench_and_writes_are_not_settings(tmp_path: Path) -> None:
    for path in ("tests/test_x.py", "gateway/migrations/0001_x.py", "bench/x.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(f'import os\nos.environ.get("{PLANTED}")\n')
    (tmp_path / "core.py").write_text(f'import os\nos.environ["{PLANTED}"] = "1"\n')

    assert environment_reads(tmp_path) == {}


def test_the_makefile_variables_are_those_a_caller_sets() -> None:
    makefile = textwrap.dedent("""\
        HOST ?= 127.0.0.1
        BIN := .venv/bin
        override WORKERS := $(or $(WORKERS),1)
        serve:
        \t$(BIN)/serve $(HOST) $(WORKERS) $(EXTRA_ARGS) "$$BROWSER"
        """)
    assert makefile_variables(makefile) == {"HOST", "WORKERS", "EXTRA_ARGS", "BROWSER"}


def test_an_applyconfig_key_added_without_a_row_is_reported(page: str) -> None:
    class Quota(BaseModel):
        per_day: int = 1

    class PlantedOrganization(OrganizationEntry):
        quotas: list[Quota] | None = None

    class PlantedFile(ConfigFile):
        organizations: list[PlantedOrganization] = []  # type: ignore[assignment]

    assert undocumented(schema_keys(PlantedFile), page) == {
        "organizations[].quotas",
        "organizations[].quotas[].per_day",
    }


def test_a_row_nothing_reads_is_reported(page: str, reads: dict[str, set[str]]) -> None:
    retired = (
        "\n| `MORTAR_RETIRED_SETTING` | integer | `1` | `2` | Gone. |"
        "\n| `organizations[].retired` | boolean | `false` | `true` | Gone. |\n"
    )
    assert unread(page + retired, variables=reads, keys=schema_keys(ConfigFile)) == {
        "MORTAR_RETIRED_SETTING",
        "organizations[].retired",
    }
