"""A key's policy: the models it may use (others are 403 `model_not_allowed`, in each route's
envelope) and its expiry (401 `expired_key`), set from `createkey` and `applyconfig`."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from django.core.management import CommandError, call_command

from accounts.models import ApiKey, KeyChange
from telemetry.models import Run
from tests.conftest import manage, wait_for_run
from tests.support.catalog import SurfaceModels
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

DEFAULT_MODEL = "Qwen/Qwen2.5-7B-Instruct"


def new_key(*flags: str) -> str:
    """A fresh organization and a key made by the CLI with `flags`, committed; its secret."""
    name = f"policy-{time.monotonic_ns()}"
    manage("createorg", name)
    return manage("createkey", name, *flags).strip()


def chat(server: ServerProcess, secret: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "Hi"}], "stream": False},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def message(server: ServerProcess, secret: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/messages",
        json={"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]},
        headers={"x-api-key": secret},
        timeout=30,
    )


def test_a_key_limited_to_some_models_is_refused_others_on_chat_completions(
    mortar_server: ServerProcess, surface_models: SurfaceModels
) -> None:
    secret = new_key("--models", surface_models.vision)

    allowed = chat(mortar_server, secret, surface_models.vision)
    assert allowed.status_code == 200, allowed.text

    refused = chat(mortar_server, secret, DEFAULT_MODEL)
    assert refused.status_code == 403
    assert refused.json() == {
        "error": {
            "message": f"This API key may not use the model `{DEFAULT_MODEL}`; it may use: "
            f"`{surface_models.vision}`.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_allowed",
        }
    }
    # A refused request is still a run of the key's organization, with the error it got.
    run = wait_for_run(refused.headers["X-Mortar-Run-Id"])
    assert (run.http_status, run.error_code, run.model) == (403, "model_not_allowed", "")
    assert run.first_token_at is None and run.deployment == ""  # nothing was generated

    # A request without `model` asks for the default model, which the key may not use either.
    no_model = httpx.post(
        f"{mortar_server.base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi"}], "stream": False},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )
    assert no_model.status_code == 403
    assert no_model.json()["error"]["code"] == "model_not_allowed"

    client = openai.OpenAI(base_url=f"{mortar_server.base_url}/v1", api_key=secret, max_retries=0)
    # The key's model list is the models it may use.
    assert [model.id for model in client.models.list()] == [surface_models.vision]
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client.chat.completions.create(
            model=DEFAULT_MODEL, messages=[{"role": "user", "content": "Hi"}]
        )
    assert raised.value.code == "model_not_allowed"


def test_a_key_limited_to_some_models_is_refused_others_on_messages(
    mortar_server: ServerProcess, surface_models: SurfaceModels
) -> None:
    secret = new_key("--models", f"{surface_models.vision},{surface_models.anthropic_only}")

    assert message(mortar_server, secret, surface_models.anthropic_only).status_code == 200
    refused = message(mortar_server, secret, DEFAULT_MODEL)
    assert refused.status_code == 403
    body = refused.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "permission_error"
    assert f"may not use the model `{DEFAULT_MODEL}`" in body["error"]["message"]
    assert refused.headers["request-id"] == refused.headers["X-Request-Id"]

    counted = httpx.post(
        f"{mortar_server.base_url}/v1/messages/count_tokens",
        json={"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "Hi"}]},
        headers={"x-api-key": secret},
        timeout=30,
    )
    assert counted.status_code == 403
    assert counted.json()["error"]["type"] == "permission_error"

    client = anthropic.Anthropic(base_url=mortar_server.base_url, api_key=secret, max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError):
        client.messages.create(
            model=DEFAULT_MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
        )


def test_an_expired_key_is_refused_with_expired_key_on_both_routes(
    mortar_server: ServerProcess, tmp_path: Path
) -> None:
    secret = new_key("--expires", (datetime.now(UTC) + timedelta(hours=1)).isoformat())
    assert chat(mortar_server, secret, DEFAULT_MODEL).status_code == 200  # not expired yet

    # applyconfig moves the expiry to a moment just past, in another process.
    past = (datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0)
    config = tmp_path / "keys.yaml"
    config.write_text(f"keys:\n  - prefix: {secret[:11]}\n    expires_at: {past.isoformat()}\n")
    assert f"updated key {secret[:11]}" in manage("applyconfig", str(config))

    refused = chat(mortar_server, secret, DEFAULT_MODEL)
    assert refused.status_code == 401
    assert refused.json()["error"] == {
        "message": f"The API key expired at {past:%Y-%m-%d %H:%M:%S} UTC.",
        "type": "authentication_error",
        "param": None,
        "code": "expired_key",
    }
    refused = message(mortar_server, secret, DEFAULT_MODEL)
    assert refused.status_code == 401
    assert refused.json()["error"] == {
        "type": "authentication_error",
        "message": f"The API key expired at {past:%Y-%m-%d %H:%M:%S} UTC.",
    }
    # Like any request without a valid key, an expired key's request is no run.
    assert "X-Mortar-Run-Id" not in refused.headers
    key = ApiKey.objects.get(digest=hashlib.sha256(secret.encode()).hexdigest())
    assert not Run.objects.filter(api_key=key, http_status=401).exists()


def test_applyconfig_limits_a_key_to_models_and_lifts_the_limit(
    mortar_server: ServerProcess, surface_models: SurfaceModels, tmp_path: Path
) -> None:
    secret = new_key()
    assert chat(mortar_server, secret, DEFAULT_MODEL).status_code == 200
    config = tmp_path / "keys.yaml"
    config.write_text(f"keys:\n  - prefix: {secret[:11]}\n    models: [{surface_models.vision}]\n")
    assert f"updated key {secret[:11]}" in manage("applyconfig", str(config))
    assert manage("applyconfig", str(config)).count("updated key") == 0  # nothing changed

    refused = chat(mortar_server, secret, DEFAULT_MODEL)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "model_not_allowed")
    assert chat(mortar_server, secret, surface_models.vision).status_code == 200

    # An entry without `models` is every model again (applying resets what an entry leaves out).
    config.write_text(f"keys:\n  - prefix: {secret[:11]}\n")
    manage("applyconfig", str(config))
    assert chat(mortar_server, secret, DEFAULT_MODEL).status_code == 200
    key = ApiKey.objects.get(digest=hashlib.sha256(secret.encode()).hexdigest())
    assert [change.detail for change in key.changes.filter(action="changed")] == [
        "every model, no expiry",
        f"models {surface_models.vision}",
    ]


def test_applyconfig_refuses_an_unknown_model_or_key(tmp_path: Path) -> None:
    run_command("createorg", "initech")
    out, _ = run_command("createkey", "initech")
    prefix = out.strip()[:11]
    config = tmp_path / "keys.yaml"
    config.write_text(f"keys:\n  - prefix: {prefix}\n    models: [no-such-model]\n")
    with pytest.raises(CommandError, match="names unknown models: no-such-model"):
        run_command("applyconfig", str(config))
    config.write_text("keys:\n  - prefix: mk-nothing\n")
    with pytest.raises(CommandError, match="No active key has the prefix"):
        run_command("applyconfig", str(config))
    key = ApiKey.objects.get(organization__name="initech")
    assert (key.allowed_models, key.expires_at) == ([], None)


def run_command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_createkey_stores_the_policy_and_audits_it() -> None:
    run_command("createorg", "initech")
    out, _ = run_command(
        "createkey", "initech", "--models", "m-one, m-two,m-one", "--expires", "2031-02-03"
    )
    key = ApiKey.objects.get(digest=hashlib.sha256(out.strip().encode()).hexdigest())
    assert key.allowed_models == ["m-one", "m-two"]
    assert key.expires_at == datetime(2031, 2, 3, tzinfo=UTC)
    change = KeyChange.objects.get(key=key)
    assert (
        change.detail == "no limits of its own, models m-one, m-two, expires 2031-02-03 00:00 UTC"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--models", " , "], "at least one model"),
        (["--expires", "next week"], "date or time"),
        (["--expires", "2001-01-01"], "in the future"),
    ],
)
def test_createkey_refuses_a_bad_policy(flags: list[str], message: str) -> None:
    run_command("createorg", "initech")
    with pytest.raises(CommandError, match=message):
        run_command("createkey", "initech", *flags)
    assert not ApiKey.objects.filter(organization__name="initech").exists()
