"""A Postgres restart or failover, as the server sees it: every backend it holds is terminated.

The server is not restarted. Each route that reads the database must answer its first request
after the termination as it did before: replay, a re-run, /readyz, the dashboard (over HTTP,
signed in through its form), and chat completions — with a key the server has cached and one it
has never seen, whose lookup reads the database.

The server here is this module's own: its connections carry an `application_name` of their
own, so only its backends are terminated and the session's shared servers are left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import orjson
import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import Tenant, _server_env, manage, stored_bytes, wait_for_run
from tests.support.servers import (
    ServerProcess,
    signed_in,
    start_mortar,
    stream_completion,
    without_event_ids,
)
from tests.support.waiting import wait_until

# Terminating the server's backends is a Postgres operation (a restart or failover).
pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


APPLICATION_NAME = "mortar-recovery-test"
STAFF = "recovery-staff"
PASSWORD = "a recovery test password"


@dataclass(frozen=True)
class RecoveringServer:
    server: ServerProcess
    organization: str  # made with the CLI, for keys issued during the test


@pytest.fixture(scope="module")
def recovering(
    django_db_setup: None, django_db_blocker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RecoveringServer]:
    """A Mortar process of this module's own, its backends named, and a staff account."""
    from django.contrib.auth.models import User

    if connection.vendor != "postgresql":
        pytest.fail("the recovery test terminates Postgres backends: it needs Postgres")
    with django_db_blocker.unblock():
        user, _ = User.objects.get_or_create(username=STAFF, defaults={"is_staff": True})
        user.set_password(PASSWORD)
        user.save()
    env = _server_env()
    env["DATABASE_URL"] += f"?application_name={APPLICATION_NAME}"
    server = start_mortar(env, log_dir=tmp_path_factory.mktemp("recovery"))
    organization = "recovery-tests"
    manage("createorg", organization)
    yield RecoveringServer(server=server, organization=organization)
    server.stop()


def admin_connection(dbname: str | None = None) -> psycopg.Connection:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"],
        port=db["PORT"],
        user=db["USER"],
        dbname=dbname or db["NAME"],
        autocommit=True,
    )


def server_backends() -> int:
    with admin_connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
            [settings.DATABASES["default"]["NAME"], APPLICATION_NAME],
        ).fetchone()
    return row[0] if row else 0


def terminate_server_backends() -> int:
    """Terminate every backend of the server (what a restart or failover does); return how many."""
    with admin_connection() as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid() AND application_name = %s",
            [settings.DATABASES["default"]["NAME"], APPLICATION_NAME],
        ).fetchone()
    return row[0] if row else 0


@contextlib.contextmanager
def database_refusing_connections() -> Iterator[None]:
    """The test database refuses new connections and the server's are terminated: an outage
    as the server sees it, with the test's own admin session kept (on another database)."""
    database = settings.DATABASES["default"]["NAME"]
    with admin_connection("postgres") as admin:  # a database may not refuse its own session
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name = %s",
                [database, APPLICATION_NAME],
            )
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')


def complete(server: ServerProcess, secret: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps({"messages": [{"role": "user", "content": "hello"}]}),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def replay(server: ServerProcess, secret: str, run_id: str) -> httpx.Response:
    return httpx.get(
        f"{server.base_url}/v1/chat/completions/runs/{run_id}",
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def ready(server: ServerProcess) -> httpx.Response:
    return httpx.get(f"{server.base_url}/readyz", timeout=30)


def terminate_and_wait(server: ServerProcess, secret: str) -> None:
    """Terminate the server's backends and wait until they are gone.

    A request's own connection is closed when it ends; what the server keeps open is the run
    writer's connection (and its readers', once they read). A completion, once stored, makes
    sure there is one to break.
    """
    stored = complete(server, secret).headers["X-Mortar-Run-Id"]
    wait_for_run(stored)
    wait_until(lambda: server_backends() >= 1, message="the server holds no connection")
    assert terminate_server_backends() >= 1  # it holds connections: there is something to break
    wait_until(lambda: server_backends() == 0, message="the terminated backends did not exit")


@pytest.fixture(scope="module")
def stored_run(
    recovering: RecoveringServer, tenant: Tenant, django_db_blocker
) -> tuple[str, bytes]:
    """A streamed run, stored, and what its client received."""
    body = {"messages": [{"role": "user", "content": "a b c"}]}
    with stream_completion(recovering.server, tenant.secret, body) as response:
        assert response.status_code == 200
        run_id = response.headers["X-Mortar-Run-Id"]
        received = b"".join(response.iter_raw())
    with django_db_blocker.unblock():
        assert stored_bytes(wait_for_run(run_id)) == received
    return run_id, received


def test_replay_answers_the_first_request_after_the_backends_are_terminated(
    recovering: RecoveringServer, tenant: Tenant, stored_run: tuple[str, bytes]
) -> None:
    run_id, received = stored_run
    assert replay(recovering.server, tenant.secret, run_id).status_code == 200
    terminate_and_wait(recovering.server, tenant.secret)

    replayed = replay(recovering.server, tenant.secret, run_id)
    assert replayed.status_code == 200, replayed.text
    assert without_event_ids(replayed.content) == received


def rerun(server: ServerProcess, secret: str, run_id: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions/runs/{run_id}/rerun",
        content=orjson.dumps({"stream": False}),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def test_a_rerun_answers_the_first_request_after_the_backends_are_terminated(
    recovering: RecoveringServer, tenant: Tenant, stored_run: tuple[str, bytes]
) -> None:
    run_id = stored_run[0]
    # The stored request is read on a worker thread: that thread holds a connection now.
    assert rerun(recovering.server, tenant.secret, run_id).status_code == 200
    terminate_and_wait(recovering.server, tenant.secret)

    answered = rerun(recovering.server, tenant.secret, run_id)
    assert answered.status_code == 200, answered.text
    stored = wait_for_run(answered.headers["X-Mortar-Run-Id"])
    assert (stored.rerun_of, stored.status) == (run_id, "completed")
    assert stored_bytes(stored) == answered.content


def test_readyz_answers_the_first_request_after_the_backends_are_terminated(
    recovering: RecoveringServer, tenant: Tenant
) -> None:
    assert ready(recovering.server).status_code == 200
    terminate_and_wait(recovering.server, tenant.secret)

    readiness = ready(recovering.server)
    assert readiness.status_code == 200, readiness.text
    assert readiness.json()["database"] == "ok"


def test_the_dashboard_answers_the_first_request_after_the_backends_are_terminated(
    recovering: RecoveringServer, tenant: Tenant, stored_run: tuple[str, bytes]
) -> None:
    with contextlib.closing(signed_in(recovering.server, STAFF, PASSWORD)) as dashboard:
        assert dashboard.get("/dashboard/runs/").status_code == 200
        terminate_and_wait(recovering.server, tenant.secret)

        runs_page = dashboard.get("/dashboard/runs/")  # the session is read from the database
        assert runs_page.status_code == 200, runs_page.text
        assert stored_run[0] in runs_page.text
        run_page = dashboard.get(f"/dashboard/runs/{stored_run[0]}/")
        assert run_page.status_code == 200, run_page.text


@pytest.mark.parametrize("key", ["cached", "never used"])
def test_chat_completions_answer_the_first_request_after_the_backends_are_terminated(
    recovering: RecoveringServer, tenant: Tenant, key: str
) -> None:
    assert complete(recovering.server, tenant.secret).status_code == 200
    # A key the server has not looked up yet: its lookup reads the database.
    secret = tenant.secret if key == "cached" else manage("createkey", recovering.organization)
    terminate_and_wait(recovering.server, tenant.secret)

    answered = complete(recovering.server, secret.strip())
    assert answered.status_code == 200, answered.text
    # The run writer reconnected too: what was answered after the termination is stored.
    stored = wait_for_run(answered.headers["X-Mortar-Run-Id"])
    assert stored.status == "completed"
    assert stored_bytes(stored) == answered.content


def test_requests_leave_no_connection_behind(recovering: RecoveringServer, tenant: Tenant) -> None:
    # Under ASGI every request runs on a thread of its own: a connection kept open after it
    # would stay behind with that thread, one per request, until Postgres refuses new clients
    # (a readiness probe every few seconds was enough).
    complete(recovering.server, tenant.secret)  # the long-lived connections, opened now
    held = server_backends()
    for _ in range(40):
        assert ready(recovering.server).status_code == 200
        assert replay(recovering.server, tenant.secret, "chatcmpl-none").status_code == 410
    wait_until(
        lambda: server_backends() <= held,
        message=lambda: f"{server_backends()} connections open, {held} before",
    )


def test_a_budgeted_request_while_the_database_refuses_connections_is_a_stored_503(
    recovering: RecoveringServer, budget_model: str
) -> None:
    """Without the ledger no one can tell what a budget can pay: the request is refused with
    503 `backend_unavailable` (not a 500), sent nowhere, and stored once the database is back."""
    secret = manage(
        "createkey", recovering.organization, "--budget-usd", "100", "--budget-period", "total"
    ).strip()
    body = {"model": budget_model, "messages": [{"role": "user", "content": "hello"}]}

    def ask() -> httpx.Response:
        return httpx.post(
            f"{recovering.server.base_url}/v1/chat/completions",
            content=orjson.dumps(body),
            headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
        )

    assert ask().status_code == 200  # the key and the model are cached now
    with database_refusing_connections():
        refused = ask()

    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "backend_unavailable"
    stored = wait_for_run(refused.headers["X-Mortar-Run-Id"])
    assert (stored.status, stored.http_status, stored.error_code) == (
        "failed",  # a 5xx: Mortar's side
        503,
        "backend_unavailable",
    )
    assert stored.held_usd is None and stored.charged_usd is None


def test_reads_while_the_database_refuses_connections_are_503s_in_the_route_s_envelope(
    recovering: RecoveringServer, tenant: Tenant, stored_run: tuple[str, bytes]
) -> None:
    """A key never seen, a stored run, a budget: what cannot be answered without the database
    is a 503 `backend_unavailable` the client may retry, never a 500."""
    never_used = manage("createkey", recovering.organization).strip()
    server = recovering.server
    hello = [{"role": "user", "content": "hello"}]
    with database_refusing_connections():
        answers = {
            "chat, a key never seen": (
                complete(server, never_used),
                "openai",
            ),
            "messages, a key never seen": (
                httpx.post(
                    f"{server.base_url}/v1/messages",
                    content=orjson.dumps({"max_tokens": 16, "messages": hello}),
                    headers={"x-api-key": never_used, "anthropic-version": "2023-06-01"},
                    timeout=30,
                ),
                "anthropic",
            ),
            "replay of a stored run": (replay(server, tenant.secret, stored_run[0]), "flat"),
            "the key's budget": (
                httpx.get(
                    f"{server.base_url}/v1/budget",
                    headers={"Authorization": f"Bearer {tenant.secret}"},
                    timeout=30,
                ),
                "openai",
            ),
        }
    for what, (answer, envelope) in answers.items():
        assert answer.status_code == 503, (what, answer.status_code, answer.text)
        body = answer.json()
        if envelope == "anthropic":
            assert body["type"] == "error", (what, body)
            assert body["error"]["type"] == "overloaded_error", (what, body)
        elif envelope == "flat":
            assert body["code"] == "backend_unavailable", (what, body)
            assert isinstance(body["error"], str), (what, body)
        else:
            assert body["error"]["code"] == "backend_unavailable", (what, body)
    # Once the database is back, the same requests are answered.
    assert complete(server, never_used).status_code == 200
    assert replay(server, tenant.secret, stored_run[0]).status_code == 200


DASHBOARD_PAGES = [
    "/dashboard/",
    "/dashboard/live/",
    "/dashboard/live/generations.json",
    "/dashboard/runs/",
    "/dashboard/runs/chatcmpl-000000000000000000000000/",
    "/dashboard/playground/",
    "/dashboard/sessions/",
    "/dashboard/spend/",
    "/dashboard/audit/",
    "/dashboard/audit/?format=csv",
    "/dashboard/budgets/",
    "/dashboard/keys/",
    "/admin/",
]


def test_dashboard_pages_while_the_database_refuses_connections_are_503_pages_saying_so(
    recovering: RecoveringServer,
) -> None:
    server = recovering.server
    client = signed_in(server, STAFF, PASSWORD)
    try:
        with database_refusing_connections():
            answers = {page: client.get(page) for page in DASHBOARD_PAGES}
            signing_in = httpx.get(f"{server.base_url}/dashboard/login/", timeout=30)
        for page, answer in answers.items():
            assert answer.status_code == 503, (page, answer.status_code, answer.text[:300])
            assert answer.headers["content-type"].startswith("text/html"), page
            assert "Mortar cannot reach the database right now" in answer.text, page
            assert answer.headers["Retry-After"] == "5", page
        # The sign-in page needs no database to show its form.
        assert signing_in.status_code == 200
        # Once the database is back, the same pages are answered.
        for page in DASHBOARD_PAGES:
            expected = 404 if "chatcmpl-" in page else 200  # a run that was never stored
            assert client.get(page).status_code == expected, page
    finally:
        client.close()


def test_the_server_logged_no_unhandled_error(recovering: RecoveringServer) -> None:
    # Runs last in this module (pytest keeps the file's order): after every termination and
    # every refused connection above.
    assert "Internal Server Error" not in recovering.server.log(), recovering.server.log()
