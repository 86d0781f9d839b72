"""The first-run parts of the Makefile, read with `make -n` (the recipe, not run) or run where
harmless: `make serve` installs only what serving needs, loudly, and prints its address;
`make test` gets Chromium or says in one line what to install."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.servers import ROOT

CHROMIUM_HINT = (
    "The dashboard's browser tests need Chromium: run 'sudo apt-get install chromium' "
    "(or set MORTAR_CHROMIUM to a Chromium binary), then make test again."
)


def make(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/usr/bin/make", *arguments],
        cwd=ROOT,
        env=env if env is not None else dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_serve_installs_without_the_dev_extra_and_shows_pip_s_progress() -> None:
    # -W: as if pyproject.toml had just changed, so the install steps are in the recipe.
    recipe = make("-n", "-W", "pyproject.toml", "serve").stdout
    installs = [line for line in recipe.splitlines() if "pip install" in line]
    assert ".venv/bin/pip install -e ." in installs
    assert not any("[dev]" in line or " -q" in line for line in installs)


def test_make_install_still_brings_the_dev_tools() -> None:
    recipe = make("-n", "-W", "pyproject.toml", "install").stdout
    assert ".venv/bin/pip install -e '.[dev]'" in recipe


def test_make_serve_prints_the_address_clients_use() -> None:
    assert "bootstrap --base-url http://127.0.0.1:8000" in make("-n", "serve").stdout
    chosen = make("-n", "serve", "HOST=0.0.0.0", "PORT=9100").stdout
    assert "bootstrap --base-url http://127.0.0.1:9100" in chosen  # every interface: loopback
    assert "--host 0.0.0.0 --port 9100" in chosen


def test_without_chromium_and_root_make_test_says_in_one_line_what_to_install(
    tmp_path: Path,
) -> None:
    # An empty PATH for the recipe: no chromium, no apt-get, no `id` (as on a machine where the
    # user is not root and has no Chromium).
    done = make("chromium", env={"PATH": str(tmp_path)})
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == CHROMIUM_HINT

    named = make("chromium", env={"PATH": str(tmp_path), "MORTAR_CHROMIUM": "/opt/chromium"})
    assert named.returncode == 0, named.stderr
