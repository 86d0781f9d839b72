"""The outage test: while requests stream, the database goes away; afterwards every
run and every chunk is in Postgres, counted, not sampled.

A dedicated Mortar process reaches Postgres through a TCP proxy this test controls: cutting it
drops every connection and refuses new ones (the database is unreachable); the second outage
kills the server's backends with `pg_terminate_backend` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import psycopg
import pytest
from django.conf import settings

from gateway.models import CatalogModel, Deployment
from telemetry.models import Run, RunChunk
from tests.conftest import Tenant, _server_env, stored_bytes, wait_for_run
from tests.support.postgres_proxy import PostgresProxy
from tests.support.servers import ServerProcess, start_mortar
from tests.support.waiting import wait_until, wait_until_async

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

STREAMS = 30
PIECE_DELAY_MS = 100  # ~60 pieces a stream: about 6 s, so every stream spans the outage
UNDER_WAY_EVENTS = 5  # events a stream has received when the database goes away


@dataclass(frozen=True)
class ProxiedServer:
    server: ServerProcess
    proxy: PostgresProxy
    var_dir: Path
    model: str


@pytest.fixture(scope="module")
def proxied(
    django_db_setup: None, django_db_blocker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxiedServer]:
    """Mortar with its own var/ and its database behind a proxy, and a slow scripted model."""
    with django_db_blocker.unblock():
        deployment, _ = Deployment.objects.get_or_create(
            name="scripted-outage", defaults={"scripted_delay_ms": PIECE_DELAY_MS}
        )
        CatalogModel.objects.get_or_create(
            id="outage-scripted", defaults={"deployment": deployment, "context_window": 4096}
        )
    db = settings.DATABASES["default"]
    proxy = PostgresProxy((db["HOST"], int(db["PORT"])))
    var_dir = tmp_path_factory.mktemp("outage-var")
    env = {
        **_server_env(),
        "DATABASE_URL": f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}",
        "MORTAR_VAR_DIR": str(var_dir),
    }
    server = start_mortar(env, log_dir=tmp_path_factory.mktemp("outage-logs"))
    yield ProxiedServer(server=server, proxy=proxy, var_dir=var_dir, model="outage-scripted")
    server.stop()
    proxy.close()


@dataclass(frozen=True)
class Received:
    run_id: str
    data: bytes


async def stream_many(
    proxied: ProxiedServer, tenant: Tenant, disrupt: Callable[[], Awaitable[None]]
) -> list[Received]:
    """Start STREAMS streams; once all are under way, `disrupt` the database; read them all."""
    under_way = 0
    all_under_way = asyncio.Event()

    async def one(client: httpx.AsyncClient, n: int) -> Received:
        nonlocal under_way
        words = " ".join(f"word{n}-{i}" for i in range(170))
        body = {
            "model": proxied.model,
            "messages": [{"role": "user", "content": f"Stream {n}: {words}"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with client.stream(
            "POST",
            "/v1/chat/completions",
            content=orjson.dumps(body),
            headers={"Authorization": f"Bearer {tenant.secret}"},
        ) as response:
            assert response.status_code == 200, await response.aread()
            data = b""
            async for raw in response.aiter_raw():
                before, data = data, data + raw
                # Under way: its first pieces arrived, so its rows are in the writer's hands.
                if before.count(b"\n\n") < UNDER_WAY_EVENTS <= data.count(b"\n\n"):
                    under_way += 1
                    if under_way == STREAMS:
                        all_under_way.set()
        return Received(response.headers["X-Mortar-Run-Id"], data)

    async with httpx.AsyncClient(
        base_url=proxied.server.base_url,
        timeout=httpx.Timeout(60),
        limits=httpx.Limits(max_connections=STREAMS),
    ) as client:
        tasks = [asyncio.create_task(one(client, n)) for n in range(STREAMS)]
        try:
            await asyncio.wait_for(all_under_way.wait(), 30)
            await disrupt()
        finally:
            results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    return [r for r in results if isinstance(r, Received)]


def writer_status(proxied: ProxiedServer) -> dict:
    return httpx.get(f"{proxied.server.base_url}/readyz", timeout=10).json()["run_writer"]


def assert_every_run_and_chunk_stored(proxied: ProxiedServer, received: list[Received]) -> None:
    assert len({r.run_id for r in received}) == STREAMS
    for r in received:
        assert r.data.endswith(b"data: [DONE]\n\n")
        run = wait_for_run(r.run_id, timeout=60)
        assert run.status == Run.Status.COMPLETED, (r.run_id, run.status)
        assert stored_bytes(run) == r.data, r.run_id
        assert run.chunk_count == r.data.count(b"\n\n") == run.chunks.count()
    ids = [r.run_id for r in received]
    assert Run.objects.filter(pk__in=ids, status=Run.Status.COMPLETED).count() == STREAMS
    assert RunChunk.objects.filter(run_id__in=ids).count() == sum(
        r.data.count(b"\n\n") for r in received
    )
    # The spool that carried the rows through the outage is drained and gone.
    wait_until(
        lambda: (
            not writer_status(proxied)["spooled"]
            and not list((proxied.var_dir / "spool").glob("*"))
        ),
        timeout=20,
        message=lambda: writer_status(proxied),
    )
    status = writer_status(proxied)
    assert status["queue_depth"] == 0
    assert status["spooled"] == 0


def test_no_run_or_chunk_is_lost_while_the_database_is_unreachable(
    proxied: ProxiedServer, tenant: Tenant
) -> None:
    async def unreachable_for_three_seconds() -> None:
        proxied.proxy.cut()
        await asyncio.sleep(3)  # the outage's length: the scenario, not a wait for anything
        proxied.proxy.restore()

    received = asyncio.run(stream_many(proxied, tenant, unreachable_for_three_seconds))

    assert_every_run_and_chunk_stored(proxied, received)
    status = writer_status(proxied)
    assert status["last_error"] is not None  # the writer did see the outage
    assert status["spilled_total"] > 0  # and carried rows through it in its spool


def test_no_run_or_chunk_is_lost_when_its_backends_are_killed(
    proxied: ProxiedServer, tenant: Tenant
) -> None:
    db = settings.DATABASES["default"]
    killed: list[int] = []

    def terminate_the_servers_backends() -> int:
        with psycopg.connect(
            host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True
        ) as conn:
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid() AND client_port = ANY(%s)",
                [db["NAME"], proxied.proxy.upstream_ports()],
            ).fetchone()
        return row[0] if row else 0

    async def kill_three_times() -> None:
        gone: set[int] = set()  # the proxy's ports to backends terminated so far
        for _ in range(3):
            # Once the server is back on the database (a connection it opened since the last
            # kill), kill its backends again.
            await wait_until_async(
                lambda: set(proxied.proxy.upstream_ports()) - gone,
                within=30,
                message="the server did not reconnect",
            )
            gone.update(proxied.proxy.upstream_ports())
            killed.append(terminate_the_servers_backends())

    before = writer_status(proxied)["last_error"]
    received = asyncio.run(stream_many(proxied, tenant, kill_three_times))

    assert all(count >= 1 for count in killed), killed  # the writer's connection, each time
    assert_every_run_and_chunk_stored(proxied, received)
    after = writer_status(proxied)["last_error"]
    assert after is not None and after != before
