"""What Mortar reads as configuration, found in the code, and what docs/configuration.md
documents, for tests/test_configuration_docs.py.

Three sources, none of them a hand-written list:

- environment variables: an `ast` walk over Mortar's Python files for `os.environ.get("X")`,
  `os.environ["X"]`, `os.getenv("X")`, `os.environ.setdefault("X", …)`, `"X" in os.environ`,
  and calls of any function that reads the variable its first argument names
  (config/settings.py's `env_int("X", 5)`, …); a name may be a module constant
  (`ENV = "PROMETHEUS_MULTIPROC_DIR"`);
- the variables the Makefile and docker-compose.yml take from their caller;
- the keys of an `applyconfig` file: the fields of its pydantic schema, recursively.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"

# Not Mortar's code: the suite, the migrations, the benchmark harness (a tool that measures
# Mortar and reads a few variables of its own), and what is installed or generated.
SKIPPED_DIRECTORIES = {"tests", "migrations", "bench", "node_modules", "var"}

ENVIRON = {"os.environ", "environ"}
ENVIRON_READS = {"os.environ.get", "environ.get", "os.environ.setdefault", "os.getenv", "getenv"}
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
# A row of one of the page's tables: its first cell, the setting's name in backticks.
DOCUMENTED_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|", re.MULTILINE)


def python_files(root: Path) -> Iterator[Path]:
    """Mortar's Python files under `root`: not the tests', the migrations' or bench/'s."""
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(
            name
            for name in subdirectories
            if name not in SKIPPED_DIRECTORIES and not name.startswith(".")
        )
        yield from (Path(directory) / name for name in sorted(files) if name.endswith(".py"))


def _read_key(node: ast.AST, readers: set[str]) -> ast.expr | None:
    """The expression naming the environment variable `node` reads, if it reads one."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return node.slice if ast.unparse(node.value) in ENVIRON else None
    if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
        return node.left if ast.unparse(node.comparators[0]) in ENVIRON else None
    if isinstance(node, ast.Call) and node.args:
        called = ast.unparse(node.func)
        if called in ENVIRON_READS or called.rsplit(".", 1)[-1] in readers:
            return node.args[0]
    return None


def _reader_functions(tree: ast.Module) -> set[str]:
    """Functions that read the environment variable their first parameter names."""
    found = set()
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef) and function.args.args:
            parameter = function.args.args[0].arg
            keys = (_read_key(node, set()) for node in ast.walk(function))
            if any(isinstance(key, ast.Name) and key.id == parameter for key in keys):
                found.add(function.name)
    return found


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """The module's `NAME = "text"` constants."""
    return {
        target.id: statement.value.value
        for statement in tree.body
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)
        if isinstance(statement.value.value, str)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }


def environment_reads(root: Path = ROOT) -> dict[str, set[str]]:
    """Each environment variable Mortar's code under `root` reads, with the files reading it.

    A variable named at run time (a deployment's `api_key_env`) has no name to find."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in python_files(root)}
    readers = set().union(*(_reader_functions(tree) for tree in trees.values()))
    reads: dict[str, set[str]] = {}
    for path, tree in trees.items():
        constants = _module_strings(tree)
        for node in ast.walk(tree):
            key = _read_key(node, readers)
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                name = key.value
            elif isinstance(key, ast.Name) and key.id in constants:
                name = constants[key.id]
            else:
                continue
            reads.setdefault(name, set()).add(str(path.relative_to(root)))
    return reads


def makefile_variables(text: str) -> set[str]:
    """What the Makefile takes from its caller: variables with a default (`HOST ?= …`, and
    `override WORKERS := $(or $(WORKERS),…)`), variables it uses but never sets
    (`$(PYTEST_ARGS)`), and what its recipes read from the shell (`$$MORTAR_CHROMIUM`)."""
    defaults = re.findall(r"^(?:override\s+)?([A-Z][A-Z0-9_]*)\s*(?:\?=|:=\s*\$\(or)", text, re.M)
    assigned = re.findall(r"^(?:override\s+)?([A-Z][A-Z0-9_]*)\s*[:?]?=", text, re.M)
    used = re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text)
    shell = re.findall(r"\$\$\{?([A-Z][A-Z0-9_]*)", text)
    return set(defaults) | (set(used) - set(assigned)) | set(shell)


def compose_variables(text: str) -> set[str]:
    """The variables docker-compose.yml interpolates (`${WORKERS:-2}`)."""
    return set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", text))


def variables_read(root: Path = ROOT) -> dict[str, set[str]]:
    """Every environment variable read under `root` — by the Python, the Makefile and the
    compose file — with what reads it."""
    reads = environment_reads(root)
    for file, variables in (
        ("Makefile", makefile_variables),
        ("docker-compose.yml", compose_variables),
    ):
        if (root / file).exists():
            for name in variables((root / file).read_text()):
                reads.setdefault(name, set()).add(file)
    return reads


def _nested_schema(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The schema a field holds, with `[]` when it holds a list of them; None for a value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    arguments = [argument for argument in get_args(annotation) if argument is not NoneType]
    if get_origin(annotation) is list:
        nested = _nested_schema(arguments[0])
        return (nested[0], "[]" + nested[1]) if nested else None
    if get_origin(annotation) in (Union, UnionType) and len(arguments) == 1:  # `X | None`
        return _nested_schema(arguments[0])
    return None


def schema_keys(schema: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key of `schema` at every level, as dotted paths (`organizations[].budget.usd`)."""
    keys = set()
    for name, field in schema.model_fields.items():
        keys.add(prefix + name)
        nested = _nested_schema(field.annotation)
        if nested:
            keys |= schema_keys(nested[0], f"{prefix}{name}{nested[1]}.")
    return keys


def data_keys(data: object, prefix: str = "") -> set[str]:
    """The keys a loaded YAML document uses, in the same notation."""
    if isinstance(data, list):
        return set().union(*(data_keys(item, prefix.removesuffix(".") + "[].") for item in data))
    if not isinstance(data, dict):
        return set()
    keys = set()
    for name, value in data.items():
        keys.add(prefix + name)
        keys |= data_keys(value, f"{prefix}{name}.")
    return keys


def documented(page: str) -> set[str]:
    """The settings the page documents: the first cell of each table row, in backticks."""
    return set(DOCUMENTED_ROW.findall(page))


def documented_variables(page: str) -> set[str]:
    return {name for name in documented(page) if ENV_NAME.fullmatch(name)}


def documented_keys(page: str) -> set[str]:
    return {name for name in documented(page) if not ENV_NAME.fullmatch(name)}


def undocumented(read: Iterable[str], page: str) -> set[str]:
    """The settings read that have no row on the page."""
    return set(read) - documented(page)


def unread(page: str, *, variables: Iterable[str], keys: Iterable[str]) -> set[str]:
    """The page's rows that name a variable or a key nothing reads."""
    return (documented_variables(page) - set(variables)) | (documented_keys(page) - set(keys))
