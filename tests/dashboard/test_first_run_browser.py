"""A new operator's first minutes, as the README has them: `make serve` on a machine with
nothing configured (its own var directory: a new SQLite database), the README's first requests
with the exported key, then the printed sign-in in Chromium, and a Spend page that shows what
those requests cost, as the Cost & cache audit does."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from dashboard.templatetags.dashboard import money
from tests.support.servers import ROOT, free_port

SIGN_IN = re.compile(r"the dashboard: (\S+)/dashboard/, sign in as (\S+) with password (\S+)\)")
EXPORT = re.compile(r"export MORTAR_URL=(\S+) MORTAR_API_KEY=(\S+)")


class Served:
    def __init__(self, process: subprocess.Popen[bytes], log: Path, var_dir: Path) -> None:
        self.process = process
        self.log = log
        self.var_dir = var_dir

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def make_serve(tmp_path: Path) -> Iterator[Served]:
    """`make serve` in a process group of its own, embedded, on a free port."""
    var_dir = tmp_path / "var"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "MORTAR_", "PROMETHEUS_"))
        and key not in {"DATABASE_URL", "REDIS_URL", "WORKERS"}
    }
    env["MORTAR_VAR_DIR"] = str(var_dir)
    log = tmp_path / "make-serve.log"
    process = subprocess.Popen(
        # -o: the installed venv and assets count as up to date (no pip, no npm in a test).
        [
            "make",
            "-o",
            ".venv/.installed-serve",
            "-o",
            "dashboard/static/dashboard/vendor/uPlot.iife.min.js",
            "serve",
            f"PORT={free_port()}",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    served = Served(process, log, var_dir)
    try:
        yield served
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def wait_for_the_server(served: Served, timeout: float = 120) -> tuple[str, str, str, str]:
    """The printed address, key and sign-in, once the server there answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert served.process.poll() is None, served.output()
        output = served.output()
        sign_in, export = SIGN_IN.search(output), EXPORT.search(output)
        if sign_in and export:
            try:
                if httpx.get(f"{export[1]}/healthz", timeout=1).status_code == 200:
                    return export[1], export[2], sign_in[2], sign_in[3]
            except httpx.TransportError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"make serve did not serve within {timeout}s:\n{served.output()}")


def first_requests() -> list[tuple[str, str]]:
    """The README's "First requests": each code block, with its language."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## First requests", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(bash|python)\n(.*?)```", section, flags=re.DOTALL)


def test_make_serve_then_the_printed_sign_in_shows_the_first_requests_money(
    browser, make_serve: Served
) -> None:
    base_url, secret, username, password = wait_for_the_server(make_serve)
    assert username == "admin"
    assert password == (make_serve.var_dir / "dashboard-password").read_text().strip()

    blocks = first_requests()
    assert [language for language, _ in blocks] == ["bash", "python", "python"]
    env = {**os.environ, "MORTAR_URL": base_url, "MORTAR_API_KEY": secret}
    for language, code in blocks:
        command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else None
        done = subprocess.run(
            command or [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "It caps how many tokens" in done.stdout

    with sqlite3.connect(make_serve.var_dir / "mortar.sqlite3") as database:
        runs, cost = database.execute(
            "SELECT COUNT(*), SUM(CAST(cost AS TEXT)) FROM telemetry_run"
        ).fetchone()
    assert runs == 5  # curl; the OpenAI SDK twice; the Anthropic SDK twice
    assert Decimal(str(cost)) > 0

    page = browser.new_page()
    page.goto(f"{base_url}/dashboard/spend/")
    page.wait_for_url("**/dashboard/login/**")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url("**/dashboard/spend/**")
    figure = page.locator("#spend-totals [data-figure=cost]")
    expect(figure).not_to_have_text("$0.00")
    assert figure.inner_text() == money(Decimal(str(cost)).quantize(Decimal("0.000000001")))
    assert page.locator("#spend-totals [data-figure=requests]").inner_text() == "5"
    spent = figure.inner_text()

    # The audit shows the same money at the same moment.
    page.goto(f"{base_url}/dashboard/audit/")
    total = page.locator("tfoot th")
    assert total.nth(1).inner_text() == "5"
    assert total.last.inner_text() == spent
    page.close()
