"""Mortar at another git revision, checked out into a temporary `git worktree` for one run."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from .constants import ROOT


@dataclass(frozen=True)
class Baseline:
    ref: str  # as given on the command line
    commit: str
    short: str
    subject: str
    source: Path  # the checked-out tree, run from this venv

    @property
    def target_name(self) -> str:
        return f"mortar@{self.short}"

    @property
    def has_spend_control(self) -> bool:
        """Whether this revision has budgets and rate limits to configure."""
        return (self.source / "gateway" / "pipeline" / "limits.py").exists()


@contextlib.contextmanager
def baseline_checked_out(ref: str, parent: Path) -> Iterator[Baseline]:
    """Check `ref` out under `parent`; remove the worktree again whatever happens."""
    commit = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    short = _git("rev-parse", "--short", commit)
    source = parent / f"mortar-{short}"
    baseline = Baseline(ref, commit, short, _git("log", "-1", "--format=%s", commit), source)
    unmet = unmet_requirements(_git("show", f"{commit}:pyproject.toml"))
    if unmet:
        raise SystemExit(
            f"Mortar at {ref} needs what this venv does not have: {'; '.join(unmet)}.\n"
            "Pick a baseline whose dependencies the working tree's venv satisfies."
        )
    _git("worktree", "add", "--detach", "--quiet", str(source), commit)
    try:
        yield baseline
    finally:
        removed = subprocess.run(
            ["git", "worktree", "remove", "--force", str(source)],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
        if removed.returncode != 0:
            # Its directory goes with the run's temporary directory; then git forgets it.
            shutil.rmtree(source, ignore_errors=True)
            subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True, timeout=120)


def _git(*args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {result.stderr.strip() or result.stdout}")
    return result.stdout.strip()


def unmet_requirements(pyproject: str) -> list[str]:
    """The runtime dependencies declared in `pyproject` that this venv does not satisfy."""
    declared = tomllib.loads(pyproject).get("project", {}).get("dependencies", [])
    return [problem for line in declared for problem in _unmet(Requirement(line), extra="")]


def _unmet(requirement: Requirement, *, extra: str) -> list[str]:
    if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
        return []
    try:
        installed = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        return [f"{requirement} (not installed)"]
    if not requirement.specifier.contains(installed, prereleases=True):
        return [f"{requirement} (installed: {installed})"]
    problems = []
    for wanted in sorted(requirement.extras):
        for line in metadata.requires(requirement.name) or []:
            needed = Requirement(line)
            # Only what the extra adds: the package's own dependencies came with it.
            if needed.marker and not needed.marker.evaluate({"extra": ""}):
                problems += _unmet(needed, extra=wanted)
    return problems
