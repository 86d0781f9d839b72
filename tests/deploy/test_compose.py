"""docker-compose.yml and the Dockerfile, checked without a container engine: the file is
rendered by a real compose implementation (Debian's `docker-compose config`), every service
runs a command the repository provides, and `.env.example` lists every setting."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import get_commands
from uvicorn.main import main as uvicorn_main

from config.serve import uvicorn_arguments
from tests.support.servers import ROOT, ServerProcess

SERVICES = {"gateway", "worker", "beat", "postgres", "redis", "migrate"}
MORTAR_SERVICES = {"gateway", "worker", "beat", "migrate"}


def rendered(tmp_path: Path, env_lines: str = "") -> dict[str, Any]:
    """`docker-compose config` on the repository's files, as a user runs it after
    `cp .env.example .env` (and their own settings)."""
    compose = shutil.which("docker-compose")
    assert compose, "docker-compose is needed: apt-get install docker-compose (Debian's package)"
    for name in ("docker-compose.yml", "Dockerfile", ".dockerignore"):
        shutil.copy(ROOT / name, tmp_path / name)
    env = (ROOT / ".env.example").read_text() + env_lines
    (tmp_path / ".env").write_text(env)
    result = subprocess.run(
        [compose, "--project-directory", str(tmp_path), "config"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},  # only .env: nothing from the test's environment
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> dict[str, Any]:
    return rendered(tmp_path_factory.mktemp("compose"), "SECRET_KEY=not-a-real-secret\n")


def test_the_compose_file_has_the_services_of_the_production_shape(config) -> None:
    assert set(config["services"]) == SERVICES
    assert set(config["volumes"]) == {"postgres-data", "redis-data", "mortar-var"}


@pytest.mark.parametrize(
    ("service", "image", "volume", "probe"),
    [
        ("postgres", "postgres:", "postgres-data:/var/lib/postgresql/data", "pg_isready"),
        ("redis", "redis:", "redis-data:/data", "redis-cli"),
    ],
)
def test_postgres_and_redis_are_official_images_with_a_volume_and_a_healthcheck(
    config, service, image, volume, probe
) -> None:
    spec = config["services"][service]
    assert spec["image"].startswith(image)
    assert "/" not in spec["image"]  # Docker Hub's official image, no publisher prefix
    assert any(v.startswith(volume) for v in spec["volumes"])
    assert probe in " ".join(spec["healthcheck"]["test"])


def test_mortar_services_share_one_image_the_databases_and_the_run_writer_state(config) -> None:
    for name in MORTAR_SERVICES:
        spec = config["services"][name]
        assert spec["image"] == "mortar:latest"
        assert spec["build"]["context"]
        env = spec["environment"]
        assert env["DATABASE_URL"] == "postgres://mortar:mortar@postgres:5432/mortar"
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert env["MORTAR_REQUIRE_SECRET_KEY"] == "1"
        assert env["SECRET_KEY"] == "not-a-real-secret"  # from .env
        assert "mortar-var:/app/var:rw" in spec["volumes"]


def test_migrate_runs_once_before_the_rest(config) -> None:
    services = config["services"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("gateway", "worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert depends["redis"]["condition"] == "service_healthy"


def test_the_gateway_serves_workers_processes_with_a_readyz_healthcheck(config, tmp_path) -> None:
    gateway = config["services"]["gateway"]
    command = gateway["command"]
    assert command[:3] == ["python", "-m", "config.serve"]
    assert command[command.index("--workers") + 1] == "2"  # WORKERS unset in .env.example
    assert "/readyz" in " ".join(gateway["healthcheck"]["test"])
    assert gateway["ports"] == [{"published": 8000, "target": 8000}]
    # The engine waits longer than the shutdown grace (30 s by default) before it kills.
    assert int(gateway["stop_grace_period"].rstrip("s")) > 30

    chosen = rendered(tmp_path, "SECRET_KEY=x\nWORKERS=6\nPORT=9100\n")["services"]["gateway"]
    assert chosen["command"][chosen["command"].index("--workers") + 1] == "6"
    assert chosen["ports"] == [{"published": 9100, "target": 8000}]


def test_the_gateway_command_is_valid_for_uvicorn(config) -> None:
    arguments = config["services"]["gateway"]["command"][3:]
    context = uvicorn_main.make_context("config.serve", uvicorn_arguments(arguments))
    assert context.params["app"] == "config.asgi:application"
    assert context.params["workers"] == 2
    assert context.params["host"] == "0.0.0.0"
    assert context.params["timeout_graceful_shutdown"] == 40  # the grace, 30, plus a margin


def test_the_migrate_command_and_the_documented_bootstrap_exist(config) -> None:
    command = config["services"]["migrate"]["command"]
    assert command[:2] == ["python", "manage.py"]
    assert command[2] in get_commands()
    assert (
        "bootstrap" in get_commands()
    )  # docker compose run --rm migrate python manage.py bootstrap
    assert (ROOT / "manage.py").exists()


@pytest.mark.parametrize("service", ["worker", "beat"])
def test_the_celery_commands_are_accepted_by_celery_with_this_repository_s_app(
    config, service
) -> None:
    command = config["services"][service]["command"]
    assert command[:4] == ["celery", "-A", "config", service]
    # --help after every option: celery loads the app and parses each option first.
    result = subprocess.run(
        [str(Path(sys.executable).with_name("celery")), *command[1:], "--help"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"celery {service}" in result.stdout


@pytest.mark.django_db
def test_the_gateway_healthcheck_passes_against_a_real_server(
    config, mortar_server: ServerProcess
) -> None:
    test = config["services"]["gateway"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    probe = test[3].replace("127.0.0.1:8000", f"127.0.0.1:{mortar_server.port}")
    assert subprocess.run([sys.executable, "-c", probe], timeout=30).returncode == 0
    missing = test[3].replace("127.0.0.1:8000", "127.0.0.1:9")  # nothing listens there
    assert subprocess.run([sys.executable, "-c", missing], timeout=30).returncode != 0


def test_the_dockerfile_is_multi_stage_slim_non_root_and_builds_the_assets() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", dockerfile, re.MULTILINE)
    assert [name for _, name in stages] == ["assets", "python-deps", "runtime"]
    assert stages[-1][0].startswith("python:3.11-slim")
    assert "npm ci" in dockerfile
    user = re.findall(r"^USER (\S+)$", dockerfile, re.MULTILINE)
    assert user and user[-1] not in {"root", "0"}
    # Every file the build copies from the repository exists in it.
    copied = set()
    for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile, re.MULTILINE):
        *sources, _ = line.split()
        for source in sources:
            assert (ROOT / source).exists(), source
        copied.update(sources)
    # …and every package Mortar is made of is in the image.
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    included = {pattern.rstrip("*") for pattern in packages["packages"]["find"]["include"]}
    assert included <= copied, sorted(included - copied)


def settings_variables() -> set[str]:
    """Every environment variable config/settings.py reads."""
    tree = ast.parse((ROOT / "config" / "settings.py").read_text())
    readers = {"env_str", "env_bool", "env_int", "env_float", "env_list", "get"}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in readers and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            names.add(ast.literal_eval(node.slice))
    return names


def env_example_variables() -> set[str]:
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^([A-Z][A-Z0-9_]*)=", text, re.MULTILINE))


def test_env_example_lists_every_variable_settings_reads() -> None:
    read = settings_variables()
    assert {"DATABASE_URL", "REDIS_URL", "MORTAR_SHUTDOWN_GRACE_SECONDS"} <= read  # the scan works
    # Set by config/test_settings.py for the suite's own database, never by an operator.
    read.discard("MORTAR_TEST_DB_NAME")
    assert read - env_example_variables() == set()


def test_env_example_lists_every_variable_the_compose_file_interpolates() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    interpolated = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", compose))
    assert {"POSTGRES_PASSWORD", "WORKERS", "PORT"} <= interpolated  # the scan works
    assert interpolated - env_example_variables() == set()
