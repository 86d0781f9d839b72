"""Surfaces: a catalog model serves OpenAI's chat completions, Anthropic's Messages, or both; a
request on a route that does not serve its model is a 400 naming the route that does."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
from django.core.management import CommandError, call_command

from gateway.catalog.config_file import ConfigError, parse_config
from gateway.models import CatalogModel
from tests.conftest import Tenant, stored_bytes, wait_for_run
from tests.support.catalog import SurfaceModels
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

# A real 1x1 PNG, canonical base64.
PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
    "AAAABJRU5ErkJggg=="
)


def chat(server: ServerProcess, tenant: Tenant, model: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(
            {"model": model, "messages": [{"role": "user", "content": "Hi"}], "stream": False}
        ),
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )


def messages(
    server: ServerProcess, tenant: Tenant, model: str, content: object = "Hi"
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/messages",
        content=orjson.dumps(
            {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": content}]}
        ),
        headers={"x-api-key": tenant.secret},
        timeout=30,
    )


def test_a_messages_only_model_on_chat_completions_is_a_400_naming_messages(
    mortar_server: ServerProcess, tenant: Tenant, surface_models: SurfaceModels
) -> None:
    response = chat(mortar_server, tenant, surface_models.anthropic_only)

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "The model `anthropic-only` is not served on POST /v1/chat/completions; "
            "it is served on POST /v1/messages.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "unsupported_surface",
        }
    }
    run = wait_for_run(response.headers["X-Mortar-Run-Id"])
    assert (run.status, run.error_code, run.model) == (
        "refused",
        "unsupported_surface",
        "anthropic-only",
    )
    assert stored_bytes(run) == response.content


def test_a_chat_only_model_on_messages_is_a_400_naming_chat_completions(
    mortar_server: ServerProcess, tenant: Tenant, surface_models: SurfaceModels
) -> None:
    response = messages(mortar_server, tenant, surface_models.openai_only)

    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "The model `openai-only` is not served on POST /v1/messages; it is "
            "served on POST /v1/chat/completions.",
        },
    }
    assert wait_for_run(response.headers["X-Mortar-Run-Id"]).error_code == "unsupported_surface"
    counted = httpx.post(
        f"{mortar_server.base_url}/v1/messages/count_tokens",
        content=orjson.dumps(
            {"model": "openai-only", "messages": [{"role": "user", "content": "Hi"}]}
        ),
        headers={"x-api-key": tenant.secret},
        timeout=30,
    )
    assert counted.status_code == 400
    assert "served on POST /v1/chat/completions" in counted.json()["error"]["message"]


def test_each_model_is_served_on_its_own_surfaces(
    mortar_server: ServerProcess, tenant: Tenant, surface_models: SurfaceModels
) -> None:
    assert chat(mortar_server, tenant, surface_models.openai_only).status_code == 200
    assert messages(mortar_server, tenant, surface_models.anthropic_only).status_code == 200
    # The default: both.
    assert chat(mortar_server, tenant, "Qwen/Qwen2.5-7B-Instruct").status_code == 200
    assert messages(mortar_server, tenant, "Qwen/Qwen2.5-7B-Instruct").status_code == 200


def test_the_model_list_does_not_say_which_surfaces(
    mortar_server: ServerProcess, tenant: Tenant, surface_models: SurfaceModels
) -> None:
    listed = httpx.get(
        f"{mortar_server.base_url}/v1/models", headers={"Authorization": f"Bearer {tenant.secret}"}
    ).json()["data"]
    ids = {entry["id"] for entry in listed}
    assert {"openai-only", "anthropic-only"} <= ids
    # The list names every model without saying which surfaces each one accepts: its entries
    # keep OpenAI's shape.
    assert all("surfaces" not in entry for entry in listed)


def test_a_vision_model_accepts_an_image_block(
    mortar_server: ServerProcess, tenant: Tenant, surface_models: SurfaceModels
) -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1},
    }
    response = messages(
        mortar_server,
        tenant,
        surface_models.vision,
        [image, {"type": "text", "text": "What is this?"}],
    )
    assert response.status_code == 200, response.text


# applyconfig's `surfaces` key


def apply(tmp_path: Path, text: str) -> None:
    path = tmp_path / "mortar.yaml"
    path.write_text(text)
    call_command("applyconfig", str(path))


@pytest.mark.parametrize(
    ("listed", "stored"),
    [
        ("", "both"),
        ("surfaces: [openai, anthropic]", "both"),
        ("surfaces: [anthropic, openai]", "both"),
        ("surfaces: [openai]", "openai"),
        ("surfaces: [anthropic]", "anthropic"),
    ],
)
def test_applyconfig_sets_a_models_surfaces(tmp_path: Path, listed: str, stored: str) -> None:
    apply(
        tmp_path,
        f"""
models:
  - id: surfaced
    deployment: scripted
    {listed}
""",
    )
    model = CatalogModel.objects.get(id="surfaced")
    assert model.surfaces == stored
    assert model.serves("openai") is (stored != "anthropic")
    assert model.serves("anthropic") is (stored != "openai")


@pytest.mark.parametrize(
    ("listed", "problem"),
    [
        ("[]", "at least 1 item"),
        ("[openai, openai]", "a surface is listed twice"),
        ("[bedrock]", "'openai' or 'anthropic'"),
        ("openai", "valid list"),
    ],
)
def test_applyconfig_refuses_bad_surfaces(listed: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"models:\n  - id: m\n    deployment: scripted\n    surfaces: {listed}\n")
    assert "models[m].surfaces" in str(caught.value)  # the entry named by its id
    assert problem in str(caught.value)


def test_applyconfig_reports_a_bad_surface_as_a_command_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError):
        apply(tmp_path, "models:\n  - id: m\n    deployment: scripted\n    surfaces: [x]\n")
    assert not CatalogModel.objects.filter(id="m").exists()
