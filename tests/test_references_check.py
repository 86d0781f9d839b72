"""The references check `make lint` runs (`scripts/check_references.py`): a pointer a reader of
the repository cannot follow — the product notes, the API reference files, the reference
products, an issue number — fails it with its file and line, in any tracked file and in the
OpenAPI document; a full URL, an issue tracker's included, passes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from config.api import api

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_references.py"

# What the check looks for, assembled so that this file does not trip it.
NOTES = "PRODUCT" + ".md"
ISSUE = "iss" + "ue"
REFERENCES = "sp" + "ec/"
PRODUCTS = ("Ark" + "or", "Sev" + "ren")


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )


@pytest.fixture(scope="module")
def references() -> ModuleType:
    """The script, imported as a module (it is not in a package)."""
    found = importlib.util.spec_from_file_location("check_references", SCRIPT)
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    sys.modules[found.name] = module  # its dataclass looks its module up
    found.loader.exec_module(module)
    return module


def test_the_repository_and_its_openapi_document_pass() -> None:
    result = check()

    assert (result.returncode, result.stdout) == (0, ""), result.stdout + result.stderr


def test_planted_citations_fail_with_each_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "limits.py").write_text(
        f'"""Limits."""\n\n# The cap is 4 MiB ({NOTES} decision 3).\nCAP = 4 * 1024 * 1024\n'
    )
    (tmp_path / "guide.md").write_text(f"# Guide\n\nAs {NOTES} decision 3 says, no 422.\n")
    (tmp_path / "stream.py").write_text(f"# Closes without [DONE] ({ISSUE} 14).\n")
    (tmp_path / "screenshot.png").write_bytes(b"\x89PNG\0" + f"{ISSUE} 14".encode())
    for installed in (".venv/lib/site.py", "node_modules/pkg/index.js"):  # not the project's
        (tmp_path / installed).parent.mkdir(parents=True)
        (tmp_path / installed).write_text(f"// {ISSUE} 14\n")

    result = check("--root", str(tmp_path), "--no-openapi")

    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"gateway/limits.py:3:# The cap is 4 MiB ({NOTES} decision 3).",
        f"guide.md:3:As {NOTES} decision 3 says, no 422.",
        f"stream.py:1:# Closes without [DONE] ({ISSUE} 14).",
    ]
    assert result.stderr.startswith("3 citation(s) a reader of the repository cannot follow")


def test_a_link_to_an_issue_tracker_passes(tmp_path: Path) -> None:
    (tmp_path / "relay.py").write_text(
        "# httpx closes the stream here: https://github.com/encode/httpx/issues/1234\n"
    )
    (tmp_path / "CHANGELOG.md").write_text(
        "This project adheres to [Semantic Versioning](https://semver.org/spec/v2.0.0.html).\n"
    )

    result = check("--root", str(tmp_path), "--no-openapi")

    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_in_a_git_tree_ignored_files_are_left_and_new_ones_checked(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("var/\n")
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "log.txt").write_text(f"{ISSUE} 14\n")  # ignored: not the project's
    (tmp_path / "new.py").write_text(f"# see {ISSUE} #14\n")  # not yet added: checked

    result = check("--root", str(tmp_path), "--no-openapi")

    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"new.py:1:# see {ISSUE} #14"]


@pytest.mark.parametrize(
    "line",
    [
        f"as {ISSUE} 14 says",
        f"({ISSUE} 8)",
        f"{ISSUE.capitalize()}s 12 and 14",
        f"{ISSUE} #12",
        f"{ISSUE.capitalize()} 17's targets",
        f"{REFERENCES}mortar-chat-completions.md",
        f"/work/shared/{REFERENCES}",
        f"`{REFERENCES}`",
        f"{PRODUCTS[0]}'s ranges",
        PRODUCTS[1].upper(),
        f"{NOTES.lower()}",
    ],
)
def test_each_kind_of_citation_is_found(references: ModuleType, line: str) -> None:
    assert len(references.matches(line)) == 1


@pytest.mark.parametrize(
    "line",
    [
        "https://github.com/encode/httpx/issues/1234",
        "see <https://github.com/django/channels/issues/99>",
        "https://semver.org/spec/v2.0.0.html",
        "openapi-spec/ and docs.spec/",
        "tissue 3",
        "known issues: 2 of them",
        'spec["image"]',
        "the spec_from_file_location call",
        "docs/decisions/streaming-default.md",
    ],
)
def test_what_is_not_a_citation_passes(references: ModuleType, line: str) -> None:
    assert references.matches(line) == []


def test_the_openapi_document_cites_nothing_a_client_cannot_follow(
    references: ModuleType,
) -> None:
    document = api.get_openapi_schema()

    assert len(document["paths"]) >= 8  # the real document, every operation in it
    assert list(references.document_hits(document)) == []


def test_a_citation_in_the_document_is_found_at_its_place(references: ModuleType) -> None:
    document = {"paths": {"/v1/stop": {"post": {"description": f"Stop.\n\n({ISSUE} 14)"}}}}

    hits = [str(hit) for hit in references.document_hits(document)]

    assert hits == [f"/v1/openapi.json#/paths/~1v1~1stop/post/description:({ISSUE} 14)"]
