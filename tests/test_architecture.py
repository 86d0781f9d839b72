"""The rules of the code's shape that no linter checks: where an error is defined, that a name
means one thing within an app, and that the contract keeping the pipeline apart from the API
surfaces covers every room of the gateway. (Layers and that contract: `lint-imports`; module
sizes: test_module_sizes.py.)"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = (
    "core",
    "accounts",
    "billing",
    "telemetry",
    "gateway",
    "replay",
    "dashboard",
    "config",
    "mockmodel",
    "mortar",
    "bench",
    "scripts",
)
# The packages of one layer split by sub-domain, where a page's view and its reads share the
# page's name (`dashboard/views/runs.py` and `dashboard/selectors/runs.py`).
LAYER_PACKAGES = {"views", "selectors", "services"}


def modules(app: str) -> list[Path]:
    return sorted(
        path
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts and "node_modules" not in path.parts
    )


def unit_of(path: Path) -> tuple[str, ...]:
    """Where a module's name must be unique: its app — or, for an API surface's package, that
    package (every surface has the same parts: its `api`, its `rendering`, …)."""
    parts = path.relative_to(ROOT).parts
    if parts[:2] == ("gateway", "surfaces") and len(parts) > 3:
        return parts[:3]
    return parts[:1]


def test_no_two_modules_of_one_app_share_a_name() -> None:
    found: dict[tuple[tuple[str, ...], str], list[Path]] = defaultdict(list)
    for app in APPS:
        for path in modules(app):
            if path.name != "__init__.py":
                found[(unit_of(path), path.name)].append(path.relative_to(ROOT))
    shared = {}
    for (_, name), paths in found.items():
        if len(paths) < 2:
            continue
        layers = {path.parts[1] for path in paths}
        same_depth = len({len(path.parts) for path in paths}) == 1
        if same_depth and len(layers) == len(paths) and layers <= LAYER_PACKAGES:
            continue  # one sub-domain's module in each layer package
        shared[name] = [str(path) for path in paths]
    assert shared == {}


def _defined_errors() -> set[str]:
    tree = ast.parse((ROOT / "core" / "errors.py").read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef)}


def _raisers(errors: set[str]) -> dict[str, set[str]]:
    """Each error's apps that make one (call the class), outside tests and migrations."""
    made: dict[str, set[str]] = defaultdict(set)
    for app in APPS:
        for path in modules(app):
            if path.relative_to(ROOT) == Path("core/errors.py"):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name in errors:
                    made[name].add(app)
    return made


def _made_in_core(errors: set[str]) -> set[str]:
    """The errors core/errors.py makes itself (`error_for_status`)."""
    tree = ast.parse((ROOT / "core" / "errors.py").read_text(encoding="utf-8"))
    return {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in errors
    }


def _subclassed_outside_core(errors: set[str]) -> dict[str, set[str]]:
    bases: dict[str, set[str]] = defaultdict(set)
    for app in APPS:
        if app == "core":
            continue
        for path in modules(app):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    for base in node.bases:
                        name = base.id if isinstance(base, ast.Name) else None
                        if name in errors:
                            bases[name].add(app)
    return bases


def test_core_defines_no_error_that_only_one_app_raises() -> None:
    """Core holds the error tree's base and what several layers raise; an error only one app
    raises is defined in that app."""
    errors = _defined_errors()
    made, made_in_core = _raisers(errors), _made_in_core(errors)
    bases = _subclassed_outside_core(errors)
    lone = {
        error: sorted(made[error])
        for error in errors
        if error not in made_in_core and len(made[error] | bases[error]) < 2
    }
    assert lone == {}


def test_it_finds_an_error_only_one_app_raises() -> None:
    """The check above is no formality: the errors it would flag are found."""
    assert _raisers({"ModelNotAllowed"})["ModelNotAllowed"] == {"gateway"}
    assert _raisers({"InvalidParameter"})["InvalidParameter"] >= {"gateway", "replay"}


def test_the_pipeline_s_contract_covers_every_room_of_the_gateway() -> None:
    """'The pipeline imports no surface' names each gateway module but the surfaces and the
    app's start-up that loads them: a new room is under the contract from its first commit."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [contract] = [
        contract
        for contract in config["tool"]["importlinter"]["contracts"]
        if contract["name"] == "The pipeline imports no surface"
    ]
    assert contract["forbidden_modules"] == ["gateway.surfaces"]
    gateway = ROOT / "gateway"
    rooms = {
        f"gateway.{path.stem if path.is_file() else path.name}"
        for path in gateway.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert set(contract["source_modules"]) == rooms - {"gateway.surfaces", "gateway.apps"}
