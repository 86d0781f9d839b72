"""Reads off the primary, against a real streaming replica: a primary cluster of this session's
own (a copy of the test database), a replica of it made by `pg_basebackup -R` on another port,
and Mortar processes with `DATABASE_REPLICA_URL` set.

What a page read comes from is shown by pausing the replica's replay: the replica then holds an
older state than the primary, and a page or replay shows which one it read. One server trusts
the replica however far behind it is (`MORTAR_REPLICA_MAX_LAG_SECONDS` of an hour), the other
only within a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from django.conf import settings

from tests.conftest import Tenant, _database_url, _server_env
from tests.support.postgres_clusters import (
    Cluster,
    copy_database,
    primary_cluster,
    remove_scratch,
    replica_cluster,
    scratch_directory,
)
from tests.support.servers import (
    ServerProcess,
    signed_in,
    start_mortar,
    stream_completion,
    without_event_ids,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.postgres, pytest.mark.replica]

DBNAME = "test_mortar_replicated"
STAFF = "replica-staff"
PASSWORD = "a replica test password"
TAMPERED = b'data: {"written":"on the primary only"}\n\n'


@dataclass
class Replicated:
    primary: Cluster
    replica: Cluster
    patient: ServerProcess  # reads the replica however far behind
    strict: ServerProcess  # only within a second


def _server(primary: Cluster, replica: Cluster, *, max_lag: str, log_dir: Path) -> ServerProcess:
    env = {
        **_server_env(),
        "DATABASE_URL": primary.url(DBNAME),
        "DATABASE_REPLICA_URL": replica.url(DBNAME),
        "MORTAR_REPLICA_MAX_LAG_SECONDS": max_lag,
        # A store of its own: its writer's spool and its cached keys are not the session's.
        "MORTAR_VAR_DIR": str(log_dir),
        "MORTAR_REDIS_PREFIX": f"{settings.REDIS_PREFIX}-replica-{max_lag}",
    }
    return start_mortar(env, log_dir=log_dir)


@pytest.fixture(scope="session")
def replicated(
    django_db_setup: None,
    django_db_blocker,
    tenant: Tenant,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Replicated]:
    """A primary with a copy of the test database, its streaming replica, and two servers."""
    from django.contrib.auth.models import User

    with django_db_blocker.unblock():
        user, _ = User.objects.get_or_create(username=STAFF, defaults={"is_staff": True})
        user.set_password(PASSWORD)
        user.save()
    base = scratch_directory("mortar-replica-")
    primary = replica = None
    servers: list[ServerProcess] = []
    try:
        primary = primary_cluster(base)
        copy_database(source_url=_database_url(), target=primary, dbname=DBNAME, cwd=base)
        replica = replica_cluster(primary, base)
        for max_lag in ("3600", "1"):
            servers.append(
                _server(primary, replica, max_lag=max_lag, log_dir=tmp_path_factory.mktemp("r"))
            )
        yield Replicated(primary, replica, patient=servers[0], strict=servers[1])
    finally:
        for server in servers:
            server.stop()
        for cluster in (replica, primary):
            if cluster is not None:
                cluster.stop()
        remove_scratch(base)


def streamed_run(server: ServerProcess, secret: str) -> tuple[str, bytes]:
    body = {"messages": [{"role": "user", "content": "a b c"}], "stream": True}
    with stream_completion(server, secret, body) as response:
        assert response.status_code == 200
        return response.headers["X-Mortar-Run-Id"], b"".join(response.iter_raw())


def finished_on(cluster: Cluster, run_id: str) -> bool:
    status = cluster.query(
        "SELECT status FROM telemetry_run WHERE id = %s", [run_id], dbname=DBNAME
    )
    return status not in (None, "in_progress")


def replay(server: ServerProcess, secret: str, run_id: str) -> httpx.Response:
    return httpx.get(
        f"{server.base_url}/v1/chat/completions/runs/{run_id}",
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def replica_readiness(server: ServerProcess) -> str:
    return orjson.loads(httpx.get(f"{server.base_url}/readyz", timeout=30).content)[
        "database_replica"
    ]


def listed(client: httpx.Client) -> str:
    page = client.get("/dashboard/runs/")
    assert page.status_code == 200, page.text
    return page.text


def test_pages_and_replay_read_the_replica_and_the_primary_beyond_the_lag_bound(
    replicated: Replicated, tenant: Tenant
) -> None:
    primary, replica = replicated.primary, replicated.replica
    patient, strict = (
        signed_in(replicated.patient, STAFF, PASSWORD),
        signed_in(replicated.strict, STAFF, PASSWORD),
    )
    older, received = streamed_run(replicated.patient, tenant.secret)
    wait_until(lambda: finished_on(replica, older), message="the run never reached the replica")

    replica.query("SELECT pg_wal_replay_pause()")
    try:
        wait_until(lambda: replica.query("SELECT pg_get_wal_replay_pause_state()") == "paused")
        newer, newer_received = streamed_run(replicated.patient, tenant.secret)
        wait_until(lambda: finished_on(primary, newer), message="the run was never stored")
        # The primary alone now holds other bytes for the older run's first chunk.
        primary.query(
            "UPDATE telemetry_runchunk SET data = %s WHERE run_id = %s AND seq = 0 RETURNING seq",
            [TAMPERED, older],
            dbname=DBNAME,
        )

        # The patient server reads the replica's older state: no newer run in the list, the
        # older run's bytes as they were stored.
        page = listed(patient)
        assert older in page and newer not in page
        for path in ("/dashboard/spend/", "/dashboard/audit/", "/dashboard/sessions/"):
            assert patient.get(path).status_code == 200, path
        assert without_event_ids(replay(replicated.patient, tenant.secret, older).content) == (
            received
        )
        # What the replica does not have yet is read from the primary.
        assert patient.get(f"/dashboard/runs/{newer}/").status_code == 200
        newer_replayed = replay(replicated.patient, tenant.secret, newer)
        assert newer_replayed.status_code == 200
        assert without_event_ids(newer_replayed.content) == newer_received

        # Beyond a second behind, the strict server reads the primary.
        wait_until(
            lambda: replica_readiness(replicated.strict) == "lagging",
            message="the strict server never saw the replica lagging",
        )
        assert newer in listed(strict)
        assert TAMPERED in replay(replicated.strict, tenant.secret, older).content
    finally:
        replica.query("SELECT pg_wal_replay_resume()")

    wait_until(lambda: finished_on(replica, newer), message="the replica never caught up")
    wait_until(lambda: newer in listed(patient), message="the patient server never saw it")
    wait_until(
        lambda: replica_readiness(replicated.strict) == "ok",
        message="the strict server never trusted the replica again",
    )


def test_an_idle_primary_does_not_make_the_replica_look_behind(
    replicated: Replicated, tenant: Tenant
) -> None:
    # The last transaction the replica replayed grows old while nothing is written; all that
    # it received is applied, so it is as fresh as the primary.
    wait_until(lambda: replica_readiness(replicated.strict) == "ok")
    last = replicated.replica.query(
        "SELECT EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())::float8"
    )
    if last is None or last < 1.5:
        wait_until(
            lambda: replicated.replica.query(
                "SELECT now() - pg_last_xact_replay_timestamp() > interval '1.5 s'"
            ),
            timeout=15,
            message="the primary never went quiet",
        )
    assert replica_readiness(replicated.strict) == "ok"


def test_pages_and_replay_answer_from_the_primary_while_the_replica_is_down(
    replicated: Replicated, tenant: Tenant
) -> None:
    patient = signed_in(replicated.patient, STAFF, PASSWORD)
    stored, received = streamed_run(replicated.patient, tenant.secret)
    wait_until(lambda: finished_on(replicated.replica, stored))
    listed(patient)  # read from the replica, which the server now trusts

    replicated.replica.stop()
    try:
        later, _ = streamed_run(replicated.patient, tenant.secret)
        wait_until(lambda: finished_on(replicated.primary, later))
        # The first read after the replica went away finds it so, and reads the primary.
        assert later in listed(patient)
        assert patient.get(f"/dashboard/runs/{stored}/").status_code == 200
        assert patient.get("/dashboard/spend/").status_code == 200
        replayed = replay(replicated.patient, tenant.secret, stored)
        assert replayed.status_code == 200
        assert without_event_ids(replayed.content) == received
        assert replica_readiness(replicated.patient) == "unavailable"
    finally:
        replicated.replica.start()
