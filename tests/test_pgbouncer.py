"""Mortar behind PgBouncer in transaction pooling: Debian's `pgbouncer`, started by the test in
front of the test database with a pool of two server connections, and a Mortar process that
reaches the database only through it (`MORTAR_DATABASE_POOLER=transaction`).

PgBouncer here wipes each server connection when a transaction ends (`DISCARD ALL` always),
so whatever a client left on it — a prepared statement, a temporary table, a session setting,
a server-side cursor — is gone before its next transaction, wherever that one lands: anything
of Mortar's that relied on it would fail or leave runs unstored or holds unsettled here, not
only now and then in production.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import psycopg
import pytest
from django.conf import settings

from tests.conftest import Tenant, _server_env, stored_bytes, wait_for_run
from tests.support.budgets import (
    EXAMPLE_USD,
    QUESTION,
    budget_tenant,
    committed,
    send_together,
    settled,
    settled_charges,
    spend_of,
)
from tests.support.postgres_clusters import (
    Pooler,
    remove_scratch,
    scratch_directory,
    start_pgbouncer,
)
from tests.support.servers import ServerProcess, signed_in, start_mortar, without_event_ids
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.postgres, pytest.mark.pgbouncer]

STAFF = "pooler-staff"
PASSWORD = "a pooler test password"


@pytest.fixture(scope="session")
def pooler(django_db_setup: None, sees_other_connections: None) -> Iterator[Pooler]:
    database = settings.DATABASES["default"]
    base = scratch_directory("mortar-pgbouncer-")
    try:
        started = start_pgbouncer(
            base=base,
            host=database["HOST"],
            port=int(database["PORT"]),
            dbname=database["NAME"],
            pool_size=2,
        )
        yield started
        started.stop()
    finally:
        remove_scratch(base)


@pytest.fixture(scope="session")
def pooled_server(
    pooler: Pooler, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """Mortar reaching the test database through PgBouncer only."""
    env = {
        **_server_env(),
        "DATABASE_URL": pooler.url(settings.DATABASES["default"]["NAME"]),
        "MORTAR_DATABASE_POOLER": "transaction",
    }
    server = start_mortar(env, log_dir=tmp_path_factory.mktemp("pooled"))
    yield server
    server.stop()


def test_the_pooler_keeps_nothing_from_one_transaction_to_the_next(pooler: Pooler) -> None:
    """The harness is as strict as it says: a prepared statement does not survive."""
    with (
        psycopg.connect(
            pooler.url(settings.DATABASES["default"]["NAME"]), autocommit=True, prepare_threshold=0
        ) as conn,
        pytest.raises(psycopg.errors.InvalidSqlStatementName),
    ):
        conn.execute("SELECT %s::int + 1", [1])
        conn.execute("SELECT %s::int + 1", [2])


def test_json_and_streamed_completions_are_stored_settled_and_replayed(
    pooled_server: ServerProcess, budget_model: str
) -> None:
    tenant = budget_tenant(key_usd="1.000000")
    client = openai.OpenAI(base_url=f"{pooled_server.base_url}/v1", api_key=tenant.secret)
    messages = [{"role": "user", "content": QUESTION}]

    completion = client.chat.completions.create(
        model=budget_model, messages=messages, max_tokens=13
    )
    assert completion.choices[0].message.content
    with httpx.stream(
        "POST",
        f"{pooled_server.base_url}/v1/chat/completions",
        json={"model": budget_model, "messages": messages, "max_tokens": 13, "stream": True},
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        streamed_id = response.headers["X-Mortar-Run-Id"]
        received = b"".join(response.iter_raw())
    sdk_stream = list(
        client.chat.completions.create(
            model=budget_model, messages=messages, max_tokens=13, stream=True
        )
    )
    run_ids = [completion.id, streamed_id, sdk_stream[0].id]

    wait_until(lambda: settled(run_ids), message="holds not settled")
    runs = [wait_for_run(run_id) for run_id in run_ids]
    assert all(run.status == "completed" for run in runs)
    assert all(run.charged_usd == EXAMPLE_USD for run in runs)
    assert spend_of("key", tenant.key_id).spent_usd == 3 * EXAMPLE_USD
    assert stored_bytes(runs[1]) == received
    assert runs[2].chunks.count() >= len(sdk_stream)

    for run_id, expected in ((streamed_id, received), (completion.id, None)):
        replayed = httpx.get(
            f"{pooled_server.base_url}/v1/chat/completions/runs/{run_id}",
            headers={"Authorization": f"Bearer {tenant.secret}"},
            timeout=30,
        )
        assert replayed.status_code == 200, replayed.text
        if expected is not None:
            assert without_event_ids(replayed.content) == expected
        else:
            assert replayed.json()["id"] == completion.id


def test_concurrent_requests_all_settle(pooled_server: ServerProcess, budget_model: str) -> None:
    tenant = budget_tenant(key_usd="1.000000")
    responses = send_together([pooled_server], tenant.secret, budget_model, count=16, at_once=8)
    assert {r.status_code for r in responses} == {200}
    charged = settled_charges(responses)
    assert charged == 16 * EXAMPLE_USD
    assert spend_of("key", tenant.key_id).spent_usd == charged
    assert "prepared statement" not in pooled_server.log()


def test_dashboard_pages(pooled_server: ServerProcess, tenant: Tenant) -> None:
    from django.contrib.auth.models import User

    def staff() -> None:
        user, _ = User.objects.get_or_create(username=STAFF, defaults={"is_staff": True})
        user.set_password(PASSWORD)
        user.save()

    committed(staff)
    streamed = httpx.post(
        f"{pooled_server.base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": QUESTION}], "stream": True},
        headers={"Authorization": f"Bearer {tenant.secret}"},
        timeout=30,
    )
    assert streamed.status_code == 200
    run_id = wait_for_run(streamed.headers["X-Mortar-Run-Id"]).pk
    client = signed_in(pooled_server, STAFF, PASSWORD)
    for path in (
        "/dashboard/",
        "/dashboard/runs/",
        f"/dashboard/runs/{run_id}/",
        f"/dashboard/runs/{run_id}/replay",
        "/dashboard/spend/",
        "/dashboard/audit/",
        "/dashboard/keys/",
        "/dashboard/budgets/",
    ):
        assert client.get(path).status_code == 200, path
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["database"] == "ok"
