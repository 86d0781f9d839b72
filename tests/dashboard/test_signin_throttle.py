"""Sign-in is throttled (30 wrong passwords must not go on unchecked): after 5 failures
for one username from one address, that pair is locked out — the right password included — with
a page that says so, while other accounts still sign in. Over HTTP, on a real server process.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.dashboard.conftest import DASHBOARD_PASSWORD
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db

CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def sign_in(client: httpx.Client, username: str, password: str) -> httpx.Response:
    form = client.get("/dashboard/login/")
    token = CSRF_FIELD.search(form.text)
    assert token is not None, form.text
    return client.post(
        "/dashboard/login/",
        data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password},
    )


@pytest.fixture(scope="module")
def accounts(django_db_setup: None, django_db_blocker) -> list[str]:
    """Staff accounts of this module's own, committed for the server process: the lockouts
    here touch no other test's account."""
    from django.contrib.auth.models import User

    names = [f"throttled-{n}-{time.monotonic_ns()}" for n in range(2)]
    with django_db_blocker.unblock():
        for name in names:
            User.objects.create_user(name, password=DASHBOARD_PASSWORD, is_staff=True)
    return names


def test_five_failures_lock_the_username_out_at_this_address(
    mortar_server: ServerProcess, dashboard_users: dict[str, str], accounts: list[str]
) -> None:
    target = accounts[0]
    with httpx.Client(base_url=mortar_server.base_url, timeout=30) as client:
        failures = [sign_in(client, target, "wrong password").status_code for _ in range(4)]
        assert failures == [200] * 4  # the form again, with its error
        fifth = sign_in(client, target, "wrong password")
        locked = sign_in(client, target, DASHBOARD_PASSWORD)

    assert fifth.status_code == 429
    assert locked.status_code == 429  # the right password does not get past the lock
    assert "Too many failed sign-ins for " + target in locked.text
    assert "locked for 15 minutes" in locked.text
    assert "sessionid" not in locked.cookies

    # Another account from the same address is not locked.
    with httpx.Client(base_url=mortar_server.base_url, timeout=30) as client:
        other = sign_in(client, dashboard_users["staff"], DASHBOARD_PASSWORD)
    assert other.status_code == 302
    assert other.headers["location"] == "/dashboard/"


def test_a_success_clears_the_failures(mortar_server: ServerProcess, accounts: list[str]) -> None:
    target = accounts[1]
    with httpx.Client(base_url=mortar_server.base_url, timeout=30) as client:
        for _ in range(4):
            assert sign_in(client, target, "wrong password").status_code == 200
        assert sign_in(client, target, DASHBOARD_PASSWORD).status_code == 302
    with httpx.Client(base_url=mortar_server.base_url, timeout=30) as client:
        for _ in range(4):
            assert sign_in(client, target, "wrong password").status_code == 200
        assert sign_in(client, target, DASHBOARD_PASSWORD).status_code == 302
