"""Redis trouble is degraded service, never wrong answers.

Each test runs a Mortar process of its own whose `REDIS_URL` points at a TCP proxy in front of
the suite's Redis (`tests/support/tcp_proxy.py`), cut and restored by the test. What other
processes do — `manage.py revokekey` announcing a revocation — goes to Redis directly, as it
would from another host while this worker is cut off.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from django.conf import settings

from telemetry.models import Run
from tests.conftest import CliTenant, _server_env, manage, wait_for_run
from tests.support.servers import ServerProcess, start_mortar
from tests.support.tcp_proxy import TcpProxy
from tests.support.telemetry import Subscriber
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


@pytest.fixture
def redis_proxy() -> Iterator[TcpProxy]:
    """A proxy to the suite's Redis, cut to begin with."""
    target = urlsplit(settings.REDIS_URL)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 6379, cut=True)
    yield proxy
    proxy.close()


def start_behind(proxy: TcpProxy, log_dir) -> ServerProcess:  # type: ignore[no-untyped-def]
    env = _server_env()
    env["REDIS_URL"] = proxy.url(path=urlsplit(settings.REDIS_URL).path)
    return start_mortar(env, log_dir=log_dir)


def models(server: ServerProcess, secret: str) -> httpx.Response:
    return httpx.get(
        f"{server.base_url}/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )


def complete(server: ServerProcess, secret: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps({"stream": False, "messages": [{"role": "user", "content": "hello"}]}),
        headers={"Authorization": f"Bearer {secret}", **headers},
        timeout=30,
    )


def dedupe(key: str) -> dict[str, str]:
    """The headers of a request that shares its generation: it needs Redis."""
    return {"X-Mortar-Dedupe": "in-flight", "Idempotency-Key": key}


def test_a_worker_started_while_redis_is_unreachable_serves_what_it_can_then_recovers(
    redis_proxy: TcpProxy, new_tenant: CliTenant, tmp_path
) -> None:
    server = start_behind(redis_proxy, tmp_path)
    try:
        # The API, on a fresh key lookup from the database, without waiting for Redis.
        started = time.monotonic()
        response = models(server, new_tenant.secret)
        assert response.status_code == 200, response.text
        assert time.monotonic() - started < 4  # it used to wait 5 s for Redis, then 500
        completed = complete(server, new_tenant.secret)
        assert completed.status_code == 200, completed.text
        run = wait_for_run(completed.headers["X-Mortar-Run-Id"])
        assert run.status == Run.Status.COMPLETED

        # Where Redis is required: a 503 in the envelope, stored as a run.
        shared = complete(server, new_tenant.secret, **dedupe("redis-is-down"))
        assert shared.status_code == 503
        assert shared.json()["error"]["code"] == "backend_unavailable"
        assert shared.json()["error"]["type"] == "server_error"
        refused = wait_for_run(shared.headers["X-Mortar-Run-Id"])
        assert (refused.http_status, refused.error_code) == (503, "backend_unavailable")
        stream = httpx.get(
            f"{server.base_url}/v1/telemetry/stream",
            headers={"Authorization": f"Bearer {new_tenant.secret}"},
            timeout=30,
        )
        assert stream.status_code == 503
        assert stream.json()["error"]["code"] == "backend_unavailable"
        # A stop this worker cannot answer itself asks every worker, through Redis.
        stop = httpx.post(
            f"{server.base_url}/v1/generations/chatcmpl-elsewhere/stop",
            headers={"Authorization": f"Bearer {new_tenant.secret}"},
            timeout=30,
        )
        assert stop.status_code == 503
        assert stop.json()["error"]["code"] == "backend_unavailable"

        # Redis comes back: the worker reconnects by itself and works fully.
        redis_proxy.restore()
        wait_until(
            lambda: (
                complete(
                    server, new_tenant.secret, **{"Idempotency-Key": "redis-is-back"}
                ).status_code
                == 200
            ),
            timeout=15,
            message="the worker did not reconnect to Redis",
        )
        subscriber = Subscriber(server, new_tenant.secret)
        run_id = complete(server, new_tenant.secret).headers["X-Mortar-Run-Id"]
        subscriber.wait_for(lambda events: any(e["runId"] == run_id for e in events))
        subscriber.close()
    finally:
        server.stop()


def test_a_key_revoked_while_the_worker_was_cut_off_is_refused_once_it_reconnects(
    redis_proxy: TcpProxy, new_tenant: CliTenant, tmp_path
) -> None:
    redis_proxy.restore()
    server = start_behind(redis_proxy, tmp_path)
    try:
        assert models(server, new_tenant.secret).status_code == 200  # cached by the worker now

        redis_proxy.cut()
        assert "Revoked" in manage("revokekey", new_tenant.secret[:11])  # the worker misses it
        redis_proxy.restore()

        # Refused the moment the worker is subscribed again (the cache lasts 60 s otherwise).
        response = wait_until(
            lambda: (r := models(server, new_tenant.secret)).status_code == 401 and r,
            timeout=8,
            interval=0.1,
            message="the revoked key was still accepted",
        )
        assert response.json()["error"]["code"] == "invalid_key"
        # And it stays refused.
        for _ in range(5):
            assert models(server, new_tenant.secret).status_code == 401
    finally:
        server.stop()


def test_a_key_revoked_while_the_worker_is_cut_off_is_refused_during_the_cut(
    redis_proxy: TcpProxy, new_tenant: CliTenant, tmp_path
) -> None:
    redis_proxy.restore()
    server = start_behind(redis_proxy, tmp_path)
    try:
        assert models(server, new_tenant.secret).status_code == 200
        redis_proxy.cut()
        # A worker that knows it cannot hear revocations reads keys from the database.
        wait_until(
            lambda: "lost the broadcast" in server.log(),
            timeout=8,
            message="the worker did not notice the cut",
        )
        assert "Revoked" in manage("revokekey", new_tenant.secret[:11])
        response = models(server, new_tenant.secret)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_key"
    finally:
        server.stop()
