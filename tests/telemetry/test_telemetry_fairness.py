"""Fair telemetry: one tenant's streams cannot starve another's, each worker
reads Redis once for all its subscribers, and SIGTERM ends every stream.

The worker here is this module's own, behind a TCP proxy to Redis so its Redis connections can
be counted, with the default caps (50 streams per organization, 20 per key, per worker).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
import redis
from django.conf import settings

from accounts.models import Organization
from accounts.services import key_create
from tests.conftest import _server_env
from tests.support.servers import ServerProcess, start_mortar
from tests.support.tcp_proxy import TcpProxy
from tests.support.telemetry import Subscriber
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

PER_ORG, PER_KEY = 50, 20


@dataclass(frozen=True)
class Worker:
    server: ServerProcess
    proxy: TcpProxy


@pytest.fixture
def worker(tmp_path) -> Iterator[Worker]:  # type: ignore[no-untyped-def]
    target = urlsplit(settings.REDIS_URL)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 6379)
    env = _server_env()
    env["REDIS_URL"] = proxy.url(path=target.path)
    server = start_mortar(env, log_dir=tmp_path)
    yield Worker(server=server, proxy=proxy)
    server.stop()
    proxy.close()


@pytest.fixture(scope="module")
def noisy_keys(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> list[str]:
    """Ten keys of one organization, committed for the server (outside any test's
    transaction)."""
    with django_db_blocker.unblock():
        organization = Organization.objects.create(name=f"noisy-{time.monotonic_ns()}")
        return [key_create(organization=organization).secret for _ in range(10)]


@pytest.fixture(scope="module")
def quiet_key(django_db_setup: None, django_db_blocker, sees_other_connections: None) -> str:
    with django_db_blocker.unblock():
        organization = Organization.objects.create(name=f"quiet-{time.monotonic_ns()}")
        return key_create(organization=organization).secret


def complete(server: ServerProcess, secret: str) -> str:
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps({"messages": [{"role": "user", "content": "hello"}]}),
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response.headers["X-Mortar-Run-Id"]


def blocked_readers(proxy: TcpProxy) -> int:
    """The worker's Redis connections blocked in a read (XREAD BLOCK), per CLIENT LIST."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        clients = client.client_list()
    finally:
        client.close()
    ours = proxy.upstream_addresses()
    return sum(1 for c in clients if c["addr"] in ours and "b" in c["flags"])


class Streams:
    """Telemetry streams held open on one event loop (a thread of the test's own)."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.refused: list[httpx.Response] = []
        self.open: list[list[dict]] = []  # each open stream's events so far
        self._loop = asyncio.new_event_loop()
        self._client: httpx.AsyncClient | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._ended = 0
        import threading

        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def _run(self, coroutine, timeout: float = 60):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def hold(self, secrets: list[str]) -> None:
        """Open one stream per secret, all at once; keep the ones admitted open."""
        self._run(self._hold(secrets))

    async def _hold(self, secrets: list[str]) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.server.base_url,
                timeout=httpx.Timeout(10, read=None),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
            )
        opened = await asyncio.gather(*(self._open(secret) for secret in secrets))
        for response in opened:
            if response.status_code == 200:
                events: list[dict] = []
                self.open.append(events)
                self._readers.append(asyncio.create_task(self._read(response, events)))
            else:
                await response.aread()
                await response.aclose()
                self.refused.append(response)

    async def _open(self, secret: str) -> httpx.Response:
        assert self._client is not None
        request = self._client.build_request(
            "GET", "/v1/telemetry/stream", headers={"Authorization": f"Bearer {secret}"}
        )
        return await self._client.send(request, stream=True)

    async def _read(self, response: httpx.Response, events: list[dict]) -> None:
        try:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(orjson.loads(line[6:]))
        except httpx.HTTPError:
            pass
        finally:
            self._ended += 1

    def ended(self) -> int:
        return self._ended

    def close(self) -> None:
        async def close() -> None:
            for reader in self._readers:
                reader.cancel()
            await asyncio.gather(*self._readers, return_exceptions=True)
            if self._client is not None:
                await self._client.aclose()

        self._run(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def test_one_key_holds_at_most_its_cap_of_streams(worker: Worker, noisy_keys) -> None:
    streams = Streams(worker.server)
    try:
        streams.hold([noisy_keys[0]] * (PER_KEY + 3))
        assert len(streams.open) == PER_KEY
        assert len(streams.refused) == 3
        refused = streams.refused[0]
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "too_many_streams"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert int(refused.headers["Retry-After"]) >= 1
    finally:
        streams.close()


def test_a_tenant_holding_200_streams_cannot_break_another_tenants_telemetry(
    worker: Worker, noisy_keys, quiet_key
) -> None:
    streams = Streams(worker.server)
    try:
        streams.hold([secret for secret in noisy_keys for _ in range(PER_KEY)])  # 200

        # The other organization's stream works and gets its events.
        quiet = Subscriber(worker.server, quiet_key)
        run_id = complete(worker.server, quiet_key)
        quiet.wait_for(
            lambda events: any(e["type"] == "cost" and e["runId"] == run_id for e in events)
        )
        quiet.close()

        # The noisy one was held to its cap.
        assert len(streams.open) == PER_ORG
        assert len(streams.refused) == 200 - PER_ORG
        assert {r.status_code for r in streams.refused} == {429}
        assert {r.json()["error"]["code"] for r in streams.refused} == {"too_many_streams"}

        # Every admitted stream of the noisy tenant gets its events too, through one reader.
        noisy_run = complete(worker.server, noisy_keys[0])
        wait_until(
            lambda: all(
                any(e["type"] == "cost" and e["runId"] == noisy_run for e in list(events))
                for events in streams.open
            ),
            message="not every admitted stream got the run's events",
        )
        assert all(not any(e["runId"] == run_id for e in events) for events in streams.open), (
            "another organization's events leaked"
        )
        # 50 streams open on this worker, read by one blocking read on one Redis connection.
        assert blocked_readers(worker.proxy) == 1
    finally:
        streams.close()


def test_sigterm_ends_every_telemetry_stream_and_the_worker_exits(
    worker: Worker, noisy_keys
) -> None:
    streams = Streams(worker.server)
    try:
        streams.hold([noisy_keys[0]] * PER_KEY)
        assert len(streams.open) == PER_KEY
        worker.server.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        worker.server.process.wait(timeout=10)
        assert time.monotonic() - started < 5
        wait_until(lambda: streams.ended() == PER_KEY, timeout=5)
    finally:
        streams.close()


def test_a_quiet_stream_stays_open_past_the_redis_client_s_read_timeout(
    worker: Worker, quiet_key
) -> None:
    # redis-py gives up on a read after 5 s by default; a stream with nothing to say for
    # longer than that must still be there when something happens.
    subscriber = Subscriber(worker.server, quiet_key)
    time.sleep(7)
    run_id = complete(worker.server, quiet_key)
    subscriber.wait_for(
        lambda events: any(e["type"] == "cost" and e["runId"] == run_id for e in events)
    )
    subscriber.close()
    assert "Exception in ASGI application" not in worker.server.log()
