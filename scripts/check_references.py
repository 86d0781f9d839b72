"""Fail when the tree or the API's OpenAPI document cites what a reader of Mortar cannot follow.

A reason belongs in the repository in Mortar's own words; a pointer to the team's notes outside
it, to the API reference files they kept beside them, to the products those references came
from, or to an issue number is a dead end for anyone who clones Mortar. This script looks for
such pointers in every file git tracks (and every new file it does not ignore) and in the
document /v1/openapi.json serves, prints `path:line:text` for each, and exits 1 when there is
one. A full URL is never a hit: a link to a public project's issue tracker can be followed.

    python scripts/check_references.py              # the repository this script is in
    python scripts/check_references.py --root DIR   # another directory (git's files, else all)
    python scripts/check_references.py --no-openapi # the files only, without Django

`make lint` runs it (`make check-references`). The patterns below are assembled from pieces so
that this file does not match them itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# A link can be followed, whatever it points at: URLs are taken out of a line before matching.
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)

PATTERNS: dict[str, re.Pattern[str]] = {
    # The product owner's notes, by file name.
    "the product notes": re.compile(r"\b" + "PRODUCT" + r"\.md\b", re.IGNORECASE),
    # The directory of API reference files, as a path: `<dir>/`, `<dir>/name.md`, `shared/<dir>/`.
    # Not when the name ends a longer word or path segment (`openapi-<dir>/`, `x.<dir>/`), and
    # never inside a URL (the Semantic Versioning link in CHANGELOG.md has one).
    "the API reference files": re.compile(r"(?<![\w.-])" + "sp" + r"ec/", re.IGNORECASE),
    # The two products the API references describe.
    "a reference product": re.compile(
        r"\b(?:" + "ark" + "or" + "|" + "sev" + "ren" + ")", re.IGNORECASE
    ),
    # An issue by number: `<word> 12`, `<word>s 12 and 14`, `<word> #12`, `(<word> 8)`.
    "an issue number": re.compile(r"\b" + "iss" + r"ues?(?:\s*#\s*|\s+)\d", re.IGNORECASE),
}

OPENAPI_PATH = "/v1/openapi.json"

# Outside git, what no repository would hold: caches, installed packages (hidden directories,
# `.git` and `.venv` among them, are left too).
SKIPPED = frozenset({"__pycache__", "node_modules"})


@dataclass(frozen=True)
class Hit:
    """One citation: where (a file and line, or a place in the OpenAPI document) and the text."""

    place: str
    what: str
    text: str

    def __str__(self) -> str:
        return f"{self.place}:{self.text}"


def matches(text: str) -> list[str]:
    """Name what `text` cites that a reader cannot follow, pattern by pattern."""
    bare = URL.sub(" ", text)
    return [what for what, pattern in PATTERNS.items() if pattern.search(bare)]


def candidate_files(root: Path) -> list[Path]:
    """Files git tracks under `root`, and new ones it does not ignore; every file if no git."""
    try:
        listed = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):  # not a git work tree
        return sorted(
            path
            for path in root.rglob("*")
            if not SKIPPED.intersection(path.relative_to(root).parts)
            and not any(part.startswith(".") for part in path.relative_to(root).parts[:-1])
            and path.is_file()
            and not path.is_symlink()
        )
    names = sorted({name for name in listed.decode().split("\0") if name})
    # A tracked file deleted in the working tree, a symlink or a submodule is not read.
    return [
        root / name for name in names if (root / name).is_file() and not (root / name).is_symlink()
    ]


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file (a screenshot): there is nothing to read."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:  # removed since it was listed
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def file_hits(root: Path) -> Iterator[Hit]:
    """Every line of every candidate file under `root` that cites something unfollowable."""
    for path in candidate_files(root):
        text = text_of(path)
        if text is None:
            continue
        name = path.relative_to(root).as_posix()
        for number, line in enumerate(text.splitlines(), start=1):
            for what in matches(line):
                yield Hit(f"{name}:{number}", what, line.strip())


def _pointer_part(key: str | int) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def document_hits(document: Any, pointer: str = "") -> Iterator[Hit]:
    """Every string in a JSON document (keys included) that cites something unfollowable, at
    its JSON pointer."""
    if isinstance(document, Mapping):
        for key, value in document.items():
            here = f"{pointer}/{_pointer_part(key)}"
            for what in matches(str(key)):
                yield Hit(f"{OPENAPI_PATH}#{here}", what, str(key))
            yield from document_hits(value, here)
    elif isinstance(document, list | tuple):
        for index, value in enumerate(document):
            yield from document_hits(value, f"{pointer}/{index}")
    elif isinstance(document, str):
        for line in document.splitlines():
            for what in matches(line):
                yield Hit(f"{OPENAPI_PATH}#{pointer}", what, line.strip())


def openapi_document() -> dict[str, Any]:
    """The document /v1/openapi.json serves, built from the API object (no server, no database)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    logging.disable(logging.INFO)  # the apps' start-up lines are not this check's output
    import django

    django.setup()
    from config.api import api

    # Through JSON, as a client gets it: what the document holds is what is checked.
    document: dict[str, Any] = json.loads(json.dumps(api.get_openapi_schema(), default=str))
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=ROOT, help="the directory to check")
    parser.add_argument(
        "--no-openapi", action="store_true", help="check the files only, not the OpenAPI document"
    )
    options = parser.parse_args(argv)
    root: Path = options.root.resolve()
    hits = list(file_hits(root))
    if not options.no_openapi:
        hits.extend(document_hits(openapi_document()))
    for hit in hits:
        print(hit)
    if hits:
        kinds = sorted({hit.what for hit in hits})
        print(
            f"{len(hits)} citation(s) a reader of the repository cannot follow "
            f"({', '.join(kinds)}): say the reason itself in Mortar's words, or link a full URL.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
