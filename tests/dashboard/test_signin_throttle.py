"""Sign-in is throttled (30 wrong passwords must not go on unchecked): after 5 failures
for one username from one address, that pair is locked out — the right password included — with
a page that says so, while other accounts still sign in. Over HTTP, on a real server process.

The address is the connection's: `X-Forwarded-For` is honoured only from a proxy named in
`MORTAR_TRUSTED_PROXIES` (none by default), so a client cannot sign in past its lockout, or
never be locked, by naming an address of its choice.
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


def sign_in(
    client: httpx.Client, username: str, password: str, forwarded_for: str | None = None
) -> httpx.Response:
    headers = {} if forwarded_for is None else {"X-Forwarded-For": forwarded_for}
    form = client.get("/dashboard/login/", headers=headers)
    token = CSRF_FIELD.search(form.text)
    assert token is not None, form.text
    return client.post(
        "/dashboard/login/",
        data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password},
        headers=headers,
    )


@pytest.fixture(scope="module")
def accounts(django_db_setup: None, django_db_blocker) -> list[str]:
    """Staff accounts of this module's own, committed for the server process: the lockouts
    here touch no other test's account."""
    from django.contrib.auth.models import User

    names = [f"throttled-{n}-{time.monotonic_ns()}" for n in range(5)]
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


def test_x_forwarded_for_from_a_client_neither_lifts_nor_dodges_the_lockout(
    mortar_server: ServerProcess, accounts: list[str]
) -> None:
    locked, dodging = accounts[2], accounts[3]
    with httpx.Client(base_url=mortar_server.base_url, timeout=30) as client:
        for _ in range(5):
            sign_in(client, locked, "wrong password")
        # The right password, from "another address": still the same client, still locked.
        for forwarded in ("10.9.9.9", "10.9.9.9, 10.8.8.8", "127.0.0.2", "garbage"):
            answer = sign_in(client, locked, DASHBOARD_PASSWORD, forwarded_for=forwarded)
            assert answer.status_code == 429, forwarded
            assert "sessionid" not in answer.cookies

        # Eight wrong passwords, each claiming an address of its own: locked at the fifth.
        statuses = [
            sign_in(client, dodging, "wrong password", forwarded_for=f"10.0.0.{n}").status_code
            for n in range(8)
        ]
        assert statuses == [200] * 4 + [429] * 4
        assert sign_in(client, dodging, DASHBOARD_PASSWORD).status_code == 429


def test_x_forwarded_for_is_honoured_from_a_trusted_proxy_only(
    accounts: list[str], sees_other_connections: None, tmp_path
) -> None:
    """Behind a proxy on loopback (`MORTAR_TRUSTED_PROXIES=127.0.0.0/8`): the client is the
    right-most address the proxy did not add itself; what the client put left of it is its own
    invention and counts for nothing."""
    from tests.conftest import _server_env
    from tests.support.servers import start_mortar

    target = accounts[4]
    env = {**_server_env(), "MORTAR_TRUSTED_PROXIES": "127.0.0.0/8, 192.0.2.1"}
    server = start_mortar(env, log_dir=tmp_path, server="serve")
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            statuses = [
                sign_in(
                    client, target, "wrong password", forwarded_for=f"203.0.113.{n}, 10.1.1.1"
                ).status_code
                for n in range(5)
            ]
            assert statuses == [200] * 4 + [429]  # all from 10.1.1.1, whatever came before
            assert sign_in(client, target, DASHBOARD_PASSWORD, "10.1.1.1").status_code == 429
            # A trusted hop (192.0.2.1, another proxy) is passed over: the client is left of it.
            assert (
                sign_in(client, target, DASHBOARD_PASSWORD, "10.1.1.1, 192.0.2.1").status_code
                == 429
            )
            # Another client behind the proxy is not locked out.
            other = sign_in(client, target, DASHBOARD_PASSWORD, forwarded_for="10.2.2.2")
            assert other.status_code == 302
            assert other.headers["location"] == "/dashboard/"
    finally:
        server.stop()
    assert server.process.returncode == 0
