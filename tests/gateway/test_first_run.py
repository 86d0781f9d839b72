"""What a new operator gets: the lines `manage.py bootstrap --base-url` prints before `make
serve` serves (the address, the dashboard's sign-in, and a first request) call the server there
and get a reply; the sign-in opens the dashboard, and the demo model has example prices."""

from __future__ import annotations

import io
import stat
import subprocess
from decimal import Decimal

import orjson
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from accounts.models import Organization
from accounts.services import OPERATOR_USERNAME
from gateway.catalog.demo import DEMO_MODEL
from gateway.management.commands.bootstrap import usage
from gateway.models import CatalogModel
from tests.conftest import Tenant
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db


@pytest.fixture
def fresh_database() -> None:
    """The test's transaction as a new install's database: no account, no demo organization
    (other tests' committed fixtures are hidden until the transaction is rolled back)."""
    User.objects.all().delete()
    Organization.objects.filter(name="demo").delete()
    CatalogModel.objects.filter(id=DEMO_MODEL).update(
        price_input=0, price_cached_input=0, price_output=0
    )


def bootstrap(**options: str) -> list[str]:
    out = io.StringIO()
    call_command("bootstrap", stdout=out, **options)
    return out.getvalue().splitlines()


def test_bootstrap_prints_the_address_the_sign_in_and_a_first_request(  # type: ignore[no-untyped-def]
    settings, tmp_path, fresh_database
) -> None:
    settings.VAR_DIR = tmp_path
    lines = bootstrap(base_url="http://127.0.0.1:9000/")
    secret = lines[0].rsplit(" ", 1)[1]
    password = (tmp_path / "dashboard-password").read_text().strip()

    assert lines[0] == f"Demo organization 'demo', API key: {secret}"
    assert lines[1] == f"The demo model {DEMO_MODEL} has example prices (see applyconfig)."
    assert lines[2] == (
        "Mortar will serve on http://127.0.0.1:9000 "
        "(the dashboard: http://127.0.0.1:9000/dashboard/, "
        f"sign in as admin with password {password}). Try it:"
    )
    assert lines[3] == f"  export MORTAR_URL=http://127.0.0.1:9000 MORTAR_API_KEY={secret}"
    assert "\n".join(lines[3:]) == "\n".join(
        usage("http://127.0.0.1:9000", secret).splitlines()[1:]
    )


def test_the_sign_in_is_a_superuser_whose_password_is_kept_private(  # type: ignore[no-untyped-def]
    settings, tmp_path, fresh_database
) -> None:
    settings.VAR_DIR = tmp_path
    bootstrap()
    saved = tmp_path / "dashboard-password"
    password = saved.read_text().strip()

    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert len(password) >= 20
    user = User.objects.get(username=OPERATOR_USERNAME)
    assert user.check_password(password) and user.is_staff and user.is_superuser
    assert User.objects.count() == 1

    # The next `make serve` prints the same sign-in and makes nothing new.
    again = bootstrap()
    assert again[-1] == f"Dashboard sign-in: admin, password {password}"
    assert User.objects.count() == 1
    assert saved.read_text().strip() == password


def test_a_changed_password_is_neither_printed_nor_reset(  # type: ignore[no-untyped-def]
    settings, tmp_path, fresh_database
) -> None:
    settings.VAR_DIR = tmp_path
    bootstrap()
    admin = User.objects.get(username=OPERATOR_USERNAME)
    admin.set_password("the operator's own password")
    admin.save()

    lines = bootstrap(base_url="http://127.0.0.1:9000")
    assert "sign in as" not in "\n".join(lines)
    assert "(the dashboard: http://127.0.0.1:9000/dashboard/). Try it:" in lines[1]
    admin.refresh_from_db()
    assert admin.check_password("the operator's own password")


def test_no_sign_in_is_made_where_operators_have_accounts(  # type: ignore[no-untyped-def]
    settings, tmp_path, fresh_database
) -> None:
    settings.VAR_DIR = tmp_path
    User.objects.create_user(username="ops", password="theirs", is_staff=True)
    lines = bootstrap()
    assert not User.objects.filter(username=OPERATOR_USERNAME).exists()
    assert not (tmp_path / "dashboard-password").exists()
    assert not any("sign-in" in line for line in lines)


def test_the_demo_model_gets_example_prices_once(settings, tmp_path, fresh_database) -> None:  # type: ignore[no-untyped-def]
    settings.VAR_DIR = tmp_path
    bootstrap()
    model = CatalogModel.objects.get(id=DEMO_MODEL)
    assert (model.price_input, model.price_cached_input, model.price_output) == (
        Decimal("0.30"),
        Decimal("0.15"),
        Decimal("0.60"),
    )
    # An operator who makes the demo model free keeps it free through the next `make serve`.
    CatalogModel.objects.filter(id=DEMO_MODEL).update(price_input=0, price_output=0)
    lines = bootstrap()
    assert not any("example prices" in line for line in lines)
    model.refresh_from_db()
    assert (model.price_input, model.price_output) == (0, 0)


def test_without_a_base_url_only_the_key_and_sign_in_are_printed(  # type: ignore[no-untyped-def]
    settings, tmp_path, fresh_database
) -> None:
    settings.VAR_DIR = tmp_path
    User.objects.create_user(username="ops", password="theirs", is_staff=True)
    lines = bootstrap()
    assert lines[0].startswith("Demo organization 'demo', API key: mk-")
    assert lines[1:] == [f"The demo model {DEMO_MODEL} has example prices (see applyconfig)."]


def test_the_printed_commands_work_when_pasted(
    mortar_server: ServerProcess, tenant: Tenant
) -> None:
    pasted = "\n".join(usage(mortar_server.base_url, tenant.secret).splitlines()[1:])
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", pasted],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    events = [line[6:] for line in done.stdout.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    reply = "".join(
        choice.get("delta", {}).get("content") or ""
        for event in events[:-1]
        for choice in orjson.loads(event)["choices"]
    )
    assert reply == "It caps how many tokens the model may generate for this reply."
