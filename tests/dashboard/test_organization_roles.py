"""Organization roles on the dashboard: a viewer sees only their organization's runs, sessions,
replays, Live and spend; an admin also manages its keys and budgets; another organization's
run, replay, CSV row, Live generation and key are refused on every page."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from accounts.models import ApiKey, KeyChange, Membership, Organization
from accounts.services import key_create
from telemetry.models import Run, RunChunk, UsageRollup
from telemetry.services.rollups import usage_rollups_refresh

pytestmark = pytest.mark.django_db

MINE_RUN = "chatcmpl-0000000000000000000000a1"
THEIRS_RUN = "chatcmpl-0000000000000000000000b2"
MINE_LIVE = "chatcmpl-0000000000000000000000a3"
THEIRS_LIVE = "chatcmpl-0000000000000000000000b4"
AUDIT_DAY = datetime(2021, 5, 6, 7, tzinfo=UTC)


class World:
    """Two organizations with a key, a finished run (with its stream), a run in flight, a
    budget and an hour of rollups each; a viewer and an admin of the first."""

    def __init__(self) -> None:
        self.mine = Organization.objects.create(name="role-mine", budget_usd=Decimal(10))
        self.theirs = Organization.objects.create(name="role-theirs", budget_usd=Decimal(20))
        self.my_key = key_create(organization=self.mine, name="my-key").key
        self.their_key = key_create(organization=self.theirs, name="their-key").key
        now = timezone.now()
        for run_id, organization, key, user in (
            (MINE_RUN, self.mine, self.my_key, "alice-mine"),
            (THEIRS_RUN, self.theirs, self.their_key, "bob-theirs"),
        ):
            run = Run.objects.create(
                id=run_id,
                organization=organization,
                api_key=key,
                status=Run.Status.COMPLETED,
                accepted_at=now - timedelta(minutes=5),
                finished_at=now - timedelta(minutes=5) + timedelta(milliseconds=300),
                stream=True,
                model="role-model",
                session=f"session-{organization.name}",
                end_user=user,
                http_status=200,
                cost=Decimal("0.25"),
                request_body=b'{"messages": [{"role": "user", "content": "hi"}]}',
            )
            RunChunk.objects.create(run=run, seq=0, offset_us=0, data=b'data: {"x": 1}\n\n')
            UsageRollup.objects.create(
                hour=AUDIT_DAY,
                organization=organization,
                api_key_id=key.pk,
                end_user=user,
                requests=1,
                cost=Decimal("0.25"),
            )
        for run_id, organization in ((MINE_LIVE, self.mine), (THEIRS_LIVE, self.theirs)):
            Run.objects.create(
                id=run_id,
                organization=organization,
                status=Run.Status.IN_PROGRESS,
                accepted_at=now - timedelta(seconds=2),
                stream=True,
            )
        # The runs' hours rolled up as well: Spend reads rollups up to the last refresh (which
        # another test may have made a moment ago) and the runs after it.
        usage_rollups_refresh(since=now - timedelta(hours=1))
        self.viewer = self._member("role-viewer", Membership.Role.VIEWER)
        self.admin = self._member("role-admin", Membership.Role.ADMIN)

    def _member(self, name: str, role: str) -> Client:
        user = User.objects.create_user(name)
        Membership.objects.create(user=user, organization=self.mine, role=role)
        client = Client()
        client.force_login(user)
        return client


@pytest.fixture
def world() -> World:
    return World()


def page(client: Client, path: str, **query: object) -> str:
    response = client.get(path, query)
    assert response.status_code == 200, (path, response.status_code)
    return response.content.decode()


def csv_rows(client: Client, path: str, **query: object) -> list[list[str]]:
    response = client.get(path, {"format": "csv", **query})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.reader(io.StringIO(response.content.decode())))


@pytest.mark.parametrize("role", ["viewer", "admin"])
def test_members_see_their_organization_s_runs_and_not_another_s(world: World, role: str) -> None:
    client = getattr(world, role)
    listed = page(client, "/dashboard/runs/")
    assert MINE_RUN in listed and THEIRS_RUN not in listed
    assert "role-theirs" not in listed and "bob-theirs" not in listed  # choices too
    # Asking for the other organization by its id shows none of its runs either.
    asked = page(client, "/dashboard/runs/", organization=world.theirs.pk)
    assert THEIRS_RUN not in asked
    asked = page(client, "/dashboard/runs/", key=world.their_key.pk)
    assert THEIRS_RUN not in asked

    for path in ("", "replay", "download", "images/0"):
        mine = client.get(f"/dashboard/runs/{MINE_RUN}/{path}")
        theirs = client.get(f"/dashboard/runs/{THEIRS_RUN}/{path}")
        assert theirs.status_code == 404, path
        if path != "images/0":  # the run has no image
            assert mine.status_code == 200, path
    assert client.get(f"/dashboard/runs/{MINE_RUN}/replay")["Content-Type"] == "text/event-stream"
    assert MINE_RUN in client.get(f"/dashboard/runs/{MINE_RUN}/download").content.decode()
    compare = f"/dashboard/runs/{MINE_RUN}/compare/{THEIRS_RUN}/"
    assert client.get(compare).status_code == 404
    assert client.get(f"/dashboard/runs/{MINE_RUN}/compare/{MINE_RUN}/").status_code == 200


@pytest.mark.parametrize("role", ["viewer", "admin"])
def test_members_see_their_organization_s_sessions_spend_and_audit_only(
    world: World, role: str
) -> None:
    client = getattr(world, role)
    sessions = page(client, "/dashboard/sessions/")
    assert "session-role-mine" in sessions and "session-role-theirs" not in sessions

    overview = page(client, "/dashboard/")
    assert "role-theirs" not in overview

    spend = page(client, "/dashboard/spend/")
    assert "alice-mine" in spend and "bob-theirs" not in spend
    assert "role-theirs" not in spend
    by_organization = csv_rows(client, "/dashboard/spend/", table="organization")
    assert [row[0] for row in by_organization[1:]] == ["role-mine"]
    assert by_organization[1][1:2] == ["1"]  # one request: the other's is not summed in
    by_key = csv_rows(client, "/dashboard/spend/", table="key")
    assert [row[0] for row in by_key[1:]] == [f"{world.my_key.prefix}… my-key"]
    by_end_user = csv_rows(client, "/dashboard/spend/", table="end_user")
    assert [row[0] for row in by_end_user[1:]] == ["alice-mine"]
    asked = page(client, "/dashboard/spend/", organization=world.theirs.pk)
    assert "alice-mine" in asked and "bob-theirs" not in asked

    audit = csv_rows(
        client, "/dashboard/audit/", since="2021-05-06", until="2021-05-06", group="end_user"
    )
    assert [row[2] for row in audit[1:]] == ["alice-mine"]  # organization, key, end user
    # Another organization asked for by its id is not a filter the form accepts: refused,
    # with nothing of it in the answer.
    asked = client.get(
        "/dashboard/audit/",
        {
            "format": "csv",
            "since": "2021-05-06",
            "until": "2021-05-06",
            "organization": world.theirs.pk,
        },
    )
    assert asked.status_code == 400
    assert b"role-theirs" not in asked.content and b"bob-theirs" not in asked.content


@pytest.mark.parametrize("role", ["viewer", "admin"])
def test_members_see_their_organization_s_generations_in_flight_only(
    world: World, role: str
) -> None:
    client = getattr(world, role)
    generations = client.get("/dashboard/live/generations.json").json()["generations"]
    assert [g["id"] for g in generations] == [MINE_LIVE]
    live = page(client, "/dashboard/live/")
    assert MINE_LIVE in live and THEIRS_LIVE not in live and "role-theirs" not in live


def test_a_viewer_cannot_manage_keys_budgets_or_send_requests(world: World) -> None:
    client = world.viewer
    for path in ("/dashboard/keys/", "/dashboard/budgets/", "/dashboard/playground/"):
        assert client.get(path).status_code == 403, path
    # Re-runs are for admins: refused alike, whether the run is theirs or another's.
    assert client.get(f"/dashboard/runs/{MINE_RUN}/rerun").status_code == 403
    assert client.get(f"/dashboard/runs/{THEIRS_RUN}/rerun").status_code == 403
    assert client.post(f"/dashboard/keys/{world.my_key.pk}/revoke").status_code == 403
    stop = client.post(f"/dashboard/runs/{MINE_LIVE}/stop", HTTP_ACCEPT="application/json")
    assert stop.status_code == 403
    assert client.post("/dashboard/keys/", {"organization": world.mine.pk}).status_code == 403
    assert ApiKey.objects.filter(organization=world.mine).count() == 1
    assert ApiKey.objects.get(pk=world.my_key.pk).revoked_at is None
    # The navigation offers only the pages a viewer may use.
    nav = page(client, "/dashboard/runs/")
    assert "/dashboard/runs/" in nav and "/dashboard/keys/" not in nav
    assert "/admin/" not in nav


def test_an_admin_manages_their_organization_s_keys_only(world: World) -> None:
    client = world.admin
    keys = page(client, "/dashboard/keys/")
    assert world.my_key.prefix in keys and world.their_key.prefix not in keys
    assert "role-theirs" not in keys  # not even in the organization select

    made = client.post("/dashboard/keys/", {"organization": world.theirs.pk, "name": "sneaky"})
    assert made.status_code == 400
    assert not ApiKey.objects.filter(organization=world.theirs, name="sneaky").exists()
    made = client.post(
        "/dashboard/keys/", {"organization": world.mine.pk, "name": "new", "budget_period": "month"}
    )
    assert made.status_code == 201
    assert ApiKey.objects.filter(organization=world.mine, name="new").count() == 1

    for action, data in (("revoke", {}), ("rename", {"name": "renamed"})):
        refused = client.post(f"/dashboard/keys/{world.their_key.pk}/{action}", data)
        assert refused.status_code == 404, action
    their_key = ApiKey.objects.get(pk=world.their_key.pk)
    assert (their_key.revoked_at, their_key.name) == (None, "their-key")
    assert not KeyChange.objects.filter(key=their_key).exists()

    assert client.post(f"/dashboard/keys/{world.my_key.pk}/revoke").status_code == 302
    # Organizations' settings stay with staff.
    assert client.get("/dashboard/organizations/").status_code == 403
    nav = page(client, "/dashboard/keys/")
    assert "/dashboard/organizations/" not in nav and "/admin/" not in nav
    assert ApiKey.objects.get(pk=world.my_key.pk).revoked_at is not None
    changes = page(client, "/dashboard/keys/")
    assert "role-admin" in changes


def test_an_admin_sees_their_organization_s_budgets_and_keys_to_send_with_only(
    world: World,
) -> None:
    client = world.admin
    budgets = page(client, "/dashboard/budgets/")
    assert "role-mine" in budgets and "role-theirs" not in budgets

    playground = page(client, "/dashboard/playground/")
    assert world.my_key.prefix in playground and world.their_key.prefix not in playground
    sent = client.post(
        "/dashboard/playground/send",
        {"key": world.their_key.pk, "model": "role-model", "prompt": "hi"},
    )
    assert sent.status_code == 400
    assert "key" in sent.json()["errors"]
    assert not Run.objects.filter(api_key=world.their_key).exclude(pk=THEIRS_RUN).exists()

    assert client.get(f"/dashboard/runs/{THEIRS_RUN}/rerun").status_code == 404
    stop = client.post(f"/dashboard/runs/{THEIRS_LIVE}/stop", HTTP_ACCEPT="application/json")
    assert stop.json() == {"stopped": False, "id": THEIRS_LIVE}


def test_staff_still_see_every_organization(world: World) -> None:
    client = Client()
    client.force_login(User.objects.create_user("role-staff", is_staff=True))
    # Each organization's runs, filtered as staff may (the suite's other runs fill the first
    # page of the unfiltered list).
    mine = page(client, f"/dashboard/runs/?organization={world.mine.pk}")
    theirs = page(client, f"/dashboard/runs/?organization={world.theirs.pk}")
    assert MINE_RUN in mine and THEIRS_RUN not in mine
    assert THEIRS_RUN in theirs and MINE_RUN not in theirs
    keys = page(client, "/dashboard/keys/")
    assert world.my_key.prefix in keys and world.their_key.prefix in keys
    generations = client.get("/dashboard/live/generations.json").json()["generations"]
    # Staff also see what other tests left in flight in this database: the two organizations'
    # generations are looked at.
    ours = {world.mine.pk, world.theirs.pk}
    assert {g["id"] for g in generations if g["organizationId"] in ours} == {
        MINE_LIVE,
        THEIRS_LIVE,
    }


def test_a_member_of_two_organizations_sees_both(world: World) -> None:
    user = User.objects.create_user("role-both")
    Membership.objects.create(user=user, organization=world.mine)
    Membership.objects.create(user=user, organization=world.theirs)
    client = Client()
    client.force_login(user)
    listed = page(client, "/dashboard/runs/")
    assert MINE_RUN in listed and THEIRS_RUN in listed
    only_theirs = page(client, "/dashboard/runs/", organization=world.theirs.pk)
    assert MINE_RUN not in only_theirs and THEIRS_RUN in only_theirs


def test_setrole_gives_changes_and_takes_away_a_role(world: World) -> None:
    user = User.objects.create_user("role-cli")
    client = Client()
    client.force_login(user)
    assert client.get("/dashboard/runs/").status_code == 302  # no role yet: the sign-in

    call_command("setrole", "role-cli", "role-mine", stdout=io.StringIO())
    assert Membership.objects.get(user=user).role == "viewer"
    assert client.get("/dashboard/keys/").status_code == 403

    call_command("setrole", "role-cli", "role-mine", "--role", "admin", stdout=io.StringIO())
    assert Membership.objects.get(user=user).role == "admin"
    assert client.get("/dashboard/keys/").status_code == 200

    call_command("setrole", "role-cli", "role-mine", "--remove", stdout=io.StringIO())
    assert not Membership.objects.filter(user=user).exists()
    assert client.get("/dashboard/runs/").status_code == 302

    with pytest.raises(CommandError, match="no organization named 'nope'"):
        call_command("setrole", "role-cli", "nope")
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("setrole", "ghost", "role-mine")
    assert not Membership.objects.filter(user=user).exists()
