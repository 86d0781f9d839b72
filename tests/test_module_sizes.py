"""No module of Mortar's own passes `LIMIT` lines: past that it is doing several jobs, and is split
by job into small modules (a package with a module per sub-domain), not cut anywhere."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 450
# The tests and the migrations are not modules of the product; the rest is not the repository's.
LEFT_OUT = {"tests", "migrations", ".venv", "var", "node_modules", ".git"}


def modules() -> Iterator[Path]:
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = [name for name in subdirectories if name not in LEFT_OUT]
        yield from (Path(directory, name) for name in files if name.endswith(".py"))


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_it_counts_the_apps_modules_and_leaves_out_the_tests_and_migrations() -> None:
    found = {path.relative_to(ROOT).as_posix() for path in modules()}
    assert {"telemetry/store/writer.py", "mockmodel/server.py", "manage.py"} <= found
    assert not any(path.startswith(("tests/", ".venv/")) for path in found)
    assert not any("/migrations/" in path for path in found)


def test_no_module_passes_the_limit() -> None:
    offenders = sorted(
        (path.relative_to(ROOT).as_posix(), count)
        for path in modules()
        if (count := line_count(path)) > LIMIT
    )
    assert not offenders, f"modules over {LIMIT} lines, to split by job: " + ", ".join(
        f"{path} ({count} lines)" for path, count in offenders
    )
