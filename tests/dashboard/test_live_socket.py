"""The dashboard's websocket: staff see every organization's telemetry live, an organization's
members their organization's only; nobody else anything."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import Tenant, _committed_tenant
from tests.support.budgets import committed
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="session")
def staff_user(django_db_setup, django_db_blocker) -> str:
    from django.contrib.auth.models import User

    with django_db_blocker.unblock():
        User.objects.create_user("operator", password=PASSWORD, is_staff=True)
        User.objects.create_user("visitor", password=PASSWORD, is_staff=False)
    return "operator"


def session_cookie(server: ServerProcess, username: str) -> str:
    """Sign in through the real login form (with its CSRF token); return the session cookie."""
    with httpx.Client(base_url=server.base_url) as client:
        page = client.get("/dashboard/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]
        signed_in = client.post(
            "/dashboard/login/",
            data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
        )
        assert signed_in.status_code == 302, signed_in.text[:500]
        return signed_in.cookies["sessionid"]


def ws_url(server: ServerProcess) -> str:
    return f"ws://127.0.0.1:{server.port}/ws/telemetry/"


async def request_sent(server: ServerProcess, tenant: Tenant) -> str:
    """Send one chat completion (off the event loop); its run id."""
    response = await asyncio.to_thread(
        httpx.post,
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": False}),
        headers={"Authorization": f"Bearer {tenant.secret}"},
    )
    return response.headers["X-Mortar-Run-Id"]


def test_staff_see_events_live(mortar_server: ServerProcess, tenant: Tenant, staff_user) -> None:
    cookie = session_cookie(mortar_server, staff_user)

    async def scenario() -> list[dict]:
        async with connect(
            ws_url(mortar_server),
            additional_headers={"Cookie": f"sessionid={cookie}", "Origin": mortar_server.base_url},
        ) as socket:
            run_id = await request_sent(mortar_server, tenant)
            events = []
            while not any(e["type"] == "cost" and e["runId"] == run_id for e in events):
                events.append(json.loads(await asyncio.wait_for(socket.recv(), 10)))
            return [e for e in events if e["runId"] == run_id]

    events = asyncio.run(scenario())
    assert [e["type"] for e in events] == [
        "request.accepted",
        "optimizer.report",
        "request.routed",
        "generation.first_token",
        "generation.finished",
        "cache",
        "cost",
    ]
    assert {e["organization"] for e in events} == {tenant.organization.id}


@pytest.fixture(scope="session")
def member_user(django_db_setup, django_db_blocker, tenant: Tenant) -> str:
    """A viewer of the tenant's organization, committed for the server process."""
    from django.contrib.auth.models import User

    from accounts.models import Membership

    with django_db_blocker.unblock():
        user = User.objects.create_user("org-viewer", password=PASSWORD, is_staff=False)
        Membership.objects.create(user=user, organization=tenant.organization)
    return "org-viewer"


def test_a_member_sees_their_organization_s_events_only(
    mortar_server: ServerProcess,
    tenant: Tenant,
    other_tenant: Tenant,
    member_user: str,
    staff_user: str,
) -> None:
    cookies = {who: session_cookie(mortar_server, who) for who in (member_user, staff_user)}

    def socket_for(who: str):
        return connect(
            ws_url(mortar_server),
            additional_headers={
                "Cookie": f"sessionid={cookies[who]}",
                "Origin": mortar_server.base_url,
            },
        )

    async def until_cost(socket, run_ids: set[str], events: list[dict]) -> None:
        while not run_ids <= {e["runId"] for e in events if e["type"] == "cost"}:
            events.append(json.loads(await asyncio.wait_for(socket.recv(), 10)))

    async def scenario() -> tuple[str, str, list[dict], list[dict]]:
        async with socket_for(member_user) as member, socket_for(staff_user) as staff:
            theirs = await request_sent(mortar_server, other_tenant)
            mine = await request_sent(mortar_server, tenant)
            seen_by_staff: list[dict] = []
            seen_by_member: list[dict] = []
            # Staff get both runs' events: the other organization's were broadcast.
            await until_cost(staff, {mine, theirs}, seen_by_staff)
            await until_cost(member, {mine}, seen_by_member)
            with contextlib.suppress(TimeoutError):
                while True:
                    seen_by_member.append(json.loads(await asyncio.wait_for(member.recv(), 1)))
            return mine, theirs, seen_by_staff, seen_by_member

    mine, theirs, seen_by_staff, seen_by_member = asyncio.run(scenario())
    assert any(e["runId"] == theirs for e in seen_by_staff)
    assert [e["type"] for e in seen_by_member if e["runId"] == mine][-1] == "cost"
    assert not [e for e in seen_by_member if e["runId"] == theirs]
    assert {e["organization"] for e in seen_by_member} == {tenant.organization.id}


@pytest.mark.parametrize("who", ["visitor", "anonymous"])
def test_others_are_turned_away(mortar_server: ServerProcess, staff_user, who: str) -> None:
    headers = {"Origin": mortar_server.base_url}
    if who != "anonymous":
        headers["Cookie"] = f"sessionid={session_cookie(mortar_server, who)}"

    async def scenario() -> int | None:
        try:
            async with connect(ws_url(mortar_server), additional_headers=headers) as socket:
                await asyncio.wait_for(socket.recv(), 5)
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
        except Exception as exc:  # the handshake itself refused
            return getattr(getattr(exc, "response", None), "status_code", -1)
        return None

    assert asyncio.run(scenario()) in (4403, 403)


@pytest.fixture
def quiet_tenant(django_db_setup) -> tuple[Tenant, str]:
    """An organization of its own, and a viewer of it only: its Live socket hears nothing
    from the runs the session's other tests leave behind on the same server. Committed on a
    connection of its own, for the server process."""
    from django.contrib.auth.models import User

    from accounts.models import Membership

    name = f"live-quiet-{secrets.token_hex(4)}"

    def make() -> Tenant:
        quiet = _committed_tenant(name)
        user = User.objects.create_user(name, password=PASSWORD, is_staff=False)
        Membership.objects.create(user=user, organization=quiet.organization)
        return quiet

    return committed(make), name


@pytest.mark.redis
def test_a_socket_left_idle_longer_than_a_redis_read_timeout_still_gets_events(
    mortar_server: ServerProcess, quiet_tenant: tuple[Tenant, str]
) -> None:
    # redis-py 8 reads with a 5 s socket timeout by default, and the Redis channel layer's
    # receive blocks in Redis for 5 s at a time: without `socket_timeout: None` on the layer
    # an idle page's consumer died every few seconds and missed what came meanwhile.
    tenant, viewer = quiet_tenant
    cookie = session_cookie(mortar_server, viewer)

    async def scenario() -> list[str]:
        async with connect(
            ws_url(mortar_server),
            additional_headers={"Cookie": f"sessionid={cookie}", "Origin": mortar_server.base_url},
        ) as socket:
            with pytest.raises(TimeoutError):  # nothing happens for longer than 5 s
                await asyncio.wait_for(socket.recv(), 8)
            run_id = await request_sent(mortar_server, tenant)
            types = []
            while "cost" not in types:
                event = json.loads(await asyncio.wait_for(socket.recv(), 10))
                if event["runId"] == run_id:
                    types.append(event["type"])
            return types

    assert asyncio.run(scenario())[0] == "request.accepted"
