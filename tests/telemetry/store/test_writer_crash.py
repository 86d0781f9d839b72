"""kill -9: a worker killed with streams in flight loses no chunk its clients received.

A Mortar process of this module's own (its own var/, its writer batching once a second, so a
second of rows is only in its memory at any time) streams from the mock model server; once
every stream is under way it is killed with SIGKILL, alone or during a database outage. A new
worker on the same var/ then replays what the dead one's log holds, and every chunk each client
received is in the database: as many, byte for byte, none twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from django.conf import settings
from django.db import connection

from telemetry.models import Run, RunChunk
from telemetry.services.interruptions import WORKER_INTERRUPTED
from tests.conftest import Tenant, _server_env
from tests.support.postgres_proxy import PostgresProxy
from tests.support.servers import ServerProcess, start_mortar
from tests.support.upstreams import MockPair
from tests.support.waiting import wait_until, wait_until_async

pytestmark = pytest.mark.django_db

STREAMS = 12
# 80 pieces 50 ms apart: 4 s a stream, so every stream is cut short by the kill.
PROMPT = "[mock chunks=80 delay_ms=50] tell me a long story"
UNDER_WAY_EVENTS = 5
# The workers here hold short leases, so a dead worker's runs are closed within seconds: within
# its lease plus one renewal interval (a third of it) of the death — or, for a worker that lost
# the database, of a whole lease renewed after the database is back — plus slack for a loaded
# machine.
LEASE = 2
CLOSED_WITHIN = LEASE + LEASE / 3 + 5


@dataclass
class CrashSite:
    """Where the killed worker and its successor run: their var/, environment and database."""

    var_dir: Path
    env: dict[str, str]
    proxy: PostgresProxy | None  # Postgres only: the way to cut the database
    log_dir: Path

    def start(self) -> ServerProcess:
        return start_mortar(self.env, log_dir=self.var_dir)


@pytest.fixture
def crash_site(
    upstream_models: MockPair, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CrashSite]:
    var_dir = tmp_path_factory.mktemp("crash-var")
    env = {
        **_server_env(),
        "MORTAR_VAR_DIR": str(var_dir),
        # The writer holds a second of rows before it writes them: what the log must cover.
        "MORTAR_WRITER_INTERVAL_MS": "1000",
        "MORTAR_WORKER_LEASE_SECONDS": str(LEASE),
    }
    proxy = None
    if connection.vendor == "postgresql":
        db = settings.DATABASES["default"]
        proxy = PostgresProxy((db["HOST"], int(db["PORT"])))
        env["DATABASE_URL"] = f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}"
    yield CrashSite(var_dir=var_dir, env=env, proxy=proxy, log_dir=var_dir / "chunklog")
    if proxy is not None:
        proxy.close()


@dataclass(frozen=True)
class Received:
    run_id: str
    data: bytes  # everything the client read before the connection broke


async def stream_until_killed(
    server: ServerProcess, tenant: Tenant, before_kill: Callable[[], Awaitable[None]]
) -> list[Received]:
    """Start STREAMS streams; once all are under way, `before_kill`, then kill -9 the server."""
    under_way = 0
    all_under_way = asyncio.Event()

    async def one(client: httpx.AsyncClient) -> Received:
        nonlocal under_way
        body = {
            "model": "mock-patient",
            "messages": [{"role": "user", "content": PROMPT}],
            "stream": True,
        }
        data = b""
        async with client.stream(
            "POST",
            "/v1/chat/completions",
            content=orjson.dumps(body),
            headers={"Authorization": f"Bearer {tenant.secret}"},
        ) as response:
            assert response.status_code == 200, await response.aread()
            try:
                async for raw in response.aiter_raw():
                    before, data = data, data + raw
                    if before.count(b"\n\n") < UNDER_WAY_EVENTS <= data.count(b"\n\n"):
                        under_way += 1
                        if under_way == STREAMS:
                            all_under_way.set()
            except httpx.TransportError:
                pass  # the server died: what was read until then is what counts
        return Received(response.headers["X-Mortar-Run-Id"], data)

    async with httpx.AsyncClient(
        base_url=server.base_url,
        timeout=httpx.Timeout(30),
        limits=httpx.Limits(max_connections=STREAMS),
    ) as client:
        tasks = [asyncio.create_task(one(client)) for _ in range(STREAMS)]
        try:
            await asyncio.wait_for(all_under_way.wait(), 30)
            await before_kill()
            server.process.kill()  # SIGKILL: no shutdown, no flush
            await asyncio.to_thread(server.process.wait)
        finally:
            results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    received = [r for r in results if isinstance(r, Received)]
    assert len({r.run_id for r in received}) == STREAMS
    for r in received:  # killed mid-stream, each of them, after its first events
        assert r.data.count(b"\n\n") >= UNDER_WAY_EVENTS, r
        assert b"[DONE]" not in r.data, r
    return received


def stored_chunks(run_id: str) -> list[tuple[int, bytes]]:
    return [
        (seq, bytes(data))
        for seq, data in RunChunk.objects.filter(run_id=run_id)
        .order_by("seq")
        .values_list("seq", "data")
    ]


def holds_what_was_received(r: Received) -> bool:
    chunks = stored_chunks(r.run_id)
    return len(chunks) >= r.data.count(b"\n\n") and b"".join(c for _, c in chunks).startswith(
        r.data
    )


def assert_every_received_chunk_stored(site: CrashSite, received: list[Received]) -> None:
    wait_until(
        lambda: all(holds_what_was_received(r) for r in received),
        timeout=60,
        message=lambda: [
            (r.run_id, r.data.count(b"\n\n"), len(stored_chunks(r.run_id)))
            for r in received
            if not holds_what_was_received(r)
        ],
    )
    ids = [r.run_id for r in received]
    assert Run.objects.filter(pk__in=ids).count() == STREAMS
    for r in received:
        chunks = stored_chunks(r.run_id)
        # None twice and none missing: seq 0, 1, 2, … (the table's unique (run, seq) aside).
        assert [seq for seq, _ in chunks] == list(range(len(chunks))), r.run_id
        # Every complete event the client read is a chunk, byte for byte, in order; the chunk
        # it was reading when the connection broke is stored whole.
        events = r.data.count(b"\n\n")
        assert b"".join(c for _, c in chunks[:events]) == r.data[: r.data.rindex(b"\n\n") + 2]
    # The dead worker's log is replayed and gone.
    wait_until(
        lambda: not list(site.log_dir.glob("*.seg")),
        message=lambda: sorted(p.name for p in site.log_dir.glob("*")),
    )


def assert_runs_interrupted(received: list[Received], *, since: float, within: float) -> None:
    """No run of the dead worker is in progress `within` seconds of `since` (monotonic): each
    is closed as interrupted, with the chunks that were stored."""
    runs = Run.objects.filter(pk__in=[r.run_id for r in received])
    wait_until(
        lambda: runs.count() == STREAMS and not runs.filter(status=Run.Status.IN_PROGRESS).exists(),
        timeout=within + 30,  # a failure says how late, rather than only that it was
        message=lambda: list(runs.values_list("id", "status")),
    )
    closed_after = time.monotonic() - since
    assert closed_after <= within, f"closed {closed_after:.1f} s after, allowed {within:.1f} s"
    for run in runs:
        assert (run.status, run.error_code) == (Run.Status.INTERRUPTED, WORKER_INTERRUPTED)
        assert run.chunk_count == RunChunk.objects.filter(run=run).count()


def test_kill_9_mid_stream_loses_no_chunk_a_client_received(
    crash_site: CrashSite, tenant: Tenant
) -> None:
    server = crash_site.start()
    dead_pid = server.process.pid

    async def nothing() -> None:
        pass

    received = asyncio.run(stream_until_killed(server, tenant, nothing))
    killed_at = time.monotonic()
    # What the killed worker left: its log, unreplayed until a worker starts.
    left = list(crash_site.log_dir.glob(f"log-{dead_pid}-*.seg"))
    assert left, sorted(p.name for p in crash_site.log_dir.glob("*"))

    successor = crash_site.start()
    try:
        assert_every_received_chunk_stored(crash_site, received)
        # The successor (the live worker) closes the dead one's runs within its lease.
        assert_runs_interrupted(received, since=killed_at, within=CLOSED_WITHIN)
    finally:
        successor.stop()
    assert "chunk log: replaying" in successor.log()


@pytest.mark.postgres
def test_kill_9_during_a_database_outage_loses_no_chunk_a_client_received(
    crash_site: CrashSite, tenant: Tenant
) -> None:
    proxy = crash_site.proxy
    assert proxy is not None
    server = crash_site.start()

    def ready() -> dict:
        return httpx.get(f"{server.base_url}/readyz", timeout=10).json()["run_writer"]

    async def cut_the_database() -> None:
        proxy.cut()
        # The writer has met the outage (and spooled what it held then); the streams go on
        # for a moment, their rows in memory and in the log only.
        await wait_until_async(lambda: ready()["last_error"], within=20)
        await asyncio.sleep(0.5)

    received = asyncio.run(stream_until_killed(server, tenant, cut_the_database))

    # A new worker starts while the database is still away: it takes the log over (into its
    # spool) and writes it once the database is back.
    successor = crash_site.start()
    try:
        # The segments go once their rows are in the spool (fsync'ed), not before.
        wait_until(
            lambda: (
                "chunk log: replaying" in successor.log()
                and not list(crash_site.log_dir.glob("*.seg"))
            ),
            message=successor.log,
        )
        assert list((crash_site.var_dir / "spool").glob("*.bin"))
        proxy.restore()
        restored_at = time.monotonic()
        assert_every_received_chunk_stored(crash_site, received)
        # No run is closed while the database is away; once it is back, the successor — cut
        # off itself since it started — renews its lease for a whole lease time, then closes
        # the dead worker's runs.
        assert_runs_interrupted(received, since=restored_at, within=CLOSED_WITHIN + LEASE)
        wait_until(lambda: not list((crash_site.var_dir / "spool").glob("*.bin")), timeout=20)
    finally:
        successor.stop()
