"""Organizations and API keys: hashed storage, the management commands, revocation."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from io import StringIO

import httpx
import pytest
from django.core.management import CommandError, call_command

from accounts.models import ApiKey, Organization
from tests.conftest import CliTenant, manage
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db


def run_command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_createorg_creates_an_organization() -> None:
    out, _ = run_command("createorg", "initech")
    assert Organization.objects.filter(name="initech").count() == 1
    assert "initech" in out


def test_createorg_refuses_a_duplicate_name() -> None:
    run_command("createorg", "initech")
    with pytest.raises(CommandError, match="already exists"):
        run_command("createorg", "initech")
    assert Organization.objects.filter(name="initech").count() == 1


def test_createkey_prints_the_secret_alone_and_stores_only_its_hash() -> None:
    run_command("createorg", "initech")
    out, _ = run_command("createkey", "initech", "--name", "ci")
    secret = out.strip()
    assert "\n" not in secret and secret.startswith("mk-") and len(secret) == 3 + 48
    key = ApiKey.objects.get(organization__name="initech")
    assert key.name == "ci"
    assert key.digest == hashlib.sha256(secret.encode()).hexdigest()
    assert key.prefix == secret[:11]
    assert not ApiKey.objects.filter(digest=secret).exists()
    assert secret not in {key.prefix, key.digest, key.name}


def test_createkey_takes_a_given_secret() -> None:
    run_command("createorg", "initech")
    out, _ = run_command("createkey", "initech", "--secret", "mk-my-own-secret-value")
    assert out.strip() == "mk-my-own-secret-value"
    with pytest.raises(CommandError, match="already in use"):
        run_command("createkey", "initech", "--secret", "mk-my-own-secret-value")


def test_createkey_refuses_an_unknown_organization_and_a_short_secret() -> None:
    with pytest.raises(CommandError, match="no organization"):
        run_command("createkey", "nobody")
    run_command("createorg", "initech")
    with pytest.raises(CommandError, match="at least 16"):
        run_command("createkey", "initech", "--secret", "short")
    assert ApiKey.objects.filter(organization__name="initech").count() == 0


def test_revokekey_refuses_an_ambiguous_or_unknown_prefix() -> None:
    run_command("createorg", "initech")
    run_command("createkey", "initech", "--secret", "mk-same-start-aaaaaaaa")
    run_command("createkey", "initech", "--secret", "mk-same-start-bbbbbbbb")
    with pytest.raises(CommandError, match="More than one"):
        run_command("revokekey", "mk-same")
    with pytest.raises(CommandError, match="No active key"):
        run_command("revokekey", "mk-nothing")
    # Other tests commit revocations of their own keys: count this organization's only.
    revoked = ApiKey.objects.filter(organization__name="initech", revoked_at__isnull=False)
    assert revoked.count() == 0


@pytest.mark.redis
def test_a_revoked_key_fails_on_its_next_request_on_every_worker(
    mortar_server: ServerProcess, second_server: ServerProcess, new_tenant: CliTenant
) -> None:
    headers = {"x-api-key": new_tenant.secret}
    for server in (mortar_server, second_server):  # both workers have the key cached now
        assert httpx.get(f"{server.base_url}/v1/models", headers=headers).status_code == 200

    assert "Revoked" in manage("revokekey", new_tenant.secret[:11])

    for server in (mortar_server, second_server):
        response = httpx.get(f"{server.base_url}/v1/models", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_key"


def key_line(printed: str) -> str:
    """The line of `bootstrap`'s output that names the demo key (others name the dashboard's
    sign-in, and the demo model's prices on the first run)."""
    (line,) = [line for line in printed.splitlines() if "API key: " in line]
    return line


def test_bootstrap_uses_mortar_bootstrap_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MORTAR_BOOTSTRAP_KEY", "mk-demo-bootstrap-secret")
    out, _ = run_command("bootstrap")
    assert "API key: mk-demo-bootstrap-secret\n" in out
    out_again, _ = run_command("bootstrap")
    assert key_line(out_again) == key_line(out)
    key = ApiKey.objects.get(digest=hashlib.sha256(b"mk-demo-bootstrap-secret").hexdigest())
    assert key.organization.name == "demo"


def test_bootstrap_prints_the_same_generated_key_each_time(monkeypatch, settings, tmp_path) -> None:
    monkeypatch.delenv("MORTAR_BOOTSTRAP_KEY", raising=False)
    settings.VAR_DIR = tmp_path
    first, _ = run_command("bootstrap")
    second, _ = run_command("bootstrap")
    assert key_line(first) == key_line(second)
    secret = key_line(first).rsplit(" ", 1)[1]
    assert (tmp_path / "demo-key").read_text().strip() == secret
    assert oct((tmp_path / "demo-key").stat().st_mode & 0o777) == "0o600"
    assert ApiKey.objects.filter(organization__name="demo").count() == 1


def test_a_revoked_key_fails_on_its_next_request(
    mortar_server: ServerProcess, new_tenant: CliTenant
) -> None:
    headers = {"x-api-key": new_tenant.secret}
    assert httpx.get(f"{mortar_server.base_url}/v1/models", headers=headers).status_code == 200

    assert "Revoked" in manage("revokekey", new_tenant.secret[:11])

    response = httpx.get(f"{mortar_server.base_url}/v1/models", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_key"


def test_createkey_sets_the_key_s_budget_and_rate_limits() -> None:
    run_command("createorg", "initech")
    out, _ = run_command(
        "createkey", "initech", "--budget-usd", "1.5", "--budget-period", "day",
        "--rpm", "60", "--tpm", "5000",
    )  # fmt: skip
    key = ApiKey.objects.get(digest=hashlib.sha256(out.strip().encode()).hexdigest())
    assert (key.budget_usd, key.budget_period) == (Decimal("1.500000"), "day")
    assert (key.requests_per_minute, key.tokens_per_minute) == (60, 5000)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--budget-usd", "lots"], "amount in USD"),
        (["--budget-usd", "-2"], "positive"),
        (["--budget-usd", "0.0000001"], "micro-dollar"),
        (["--rpm", "0"], "--rpm must be a positive"),
    ],
)
def test_createkey_refuses_a_bad_budget_or_limit(flags: list[str], message: str) -> None:
    run_command("createorg", "initech")
    with pytest.raises(CommandError, match=message):
        run_command("createkey", "initech", *flags)
    assert not ApiKey.objects.filter(organization__name="initech").exists()
