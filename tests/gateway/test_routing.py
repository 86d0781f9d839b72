"""Session routing across replicas: sticky, and only a lost replica's sessions move."""

from __future__ import annotations

import httpx
import orjson
import pytest

from gateway.upstream.replicas import ReplicaHealth, replicas_for_session, route_session
from tests.conftest import Tenant, manage, wait_for_run
from tests.support.servers import ServerProcess, start_mock_model

REPLICAS = ["http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1", "http://10.0.0.3:8000/v1"]


def test_a_session_always_ranks_the_same_replica_first() -> None:
    assert all(
        replicas_for_session(f"s{i}", REPLICAS) == replicas_for_session(f"s{i}", REPLICAS)
        for i in range(100)
    )
    homes = {replicas_for_session(f"s{i}", REPLICAS)[0] for i in range(100)}
    assert homes == set(REPLICAS)


def test_removing_a_replica_moves_only_its_own_sessions() -> None:
    sessions = [f"session-{i}" for i in range(1000)]
    before = {s: replicas_for_session(s, REPLICAS)[0] for s in sessions}
    after = {s: replicas_for_session(s, REPLICAS[:2])[0] for s in sessions}
    moved = {s for s in sessions if before[s] != after[s]}
    assert moved == {s for s in sessions if before[s] == REPLICAS[2]}
    assert 250 < len(moved) < 420  # about a third


def test_a_failed_replica_sits_out_its_cool_down() -> None:
    health = ReplicaHealth(cool_down=60)
    session = "abc"
    home = replicas_for_session(session, REPLICAS)[0]
    health.mark_failed(home)
    route = route_session(session, REPLICAS, health)
    assert route.home == home
    assert route.attempts[0] != home
    assert route.attempts[-1] == home  # still a last resort
    assert len(route.attempts) == 3


@pytest.mark.django_db
def test_fifty_sessions_stick_to_their_replica_and_only_a_stopped_ones_move(
    mortar_server: ServerProcess, tenant: Tenant, tmp_path
) -> None:
    a = start_mock_model(log_dir=tmp_path)
    b = start_mock_model(log_dir=tmp_path)
    url_a, url_b = f"{a.base_url}/v1", f"{b.base_url}/v1"
    config = tmp_path / "pair.yaml"
    config.write_text(
        f"""
deployments:
  - name: sticky-pair
    upstreams: ["{url_a}", "{url_b}"]
models:
  - id: sticky
    deployment: sticky-pair
"""
    )
    manage("applyconfig", str(config))

    def served_by(session: str) -> str:
        response = httpx.post(
            f"{mortar_server.base_url}/v1/chat/completions",
            content=orjson.dumps(
                {
                    "model": "sticky",
                    "messages": [{"role": "user", "content": "hi"}],
                    "stream": False,
                }
            ),
            headers={"Authorization": f"Bearer {tenant.secret}", "X-Mortar-Session": session},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return response.headers["X-Mortar-Upstream"]

    try:
        sessions = [f"conversation-{i}" for i in range(50)]
        first = {s: served_by(s) for s in sessions}
        assert {s: served_by(s) for s in sessions} == first
        # Both replicas carry sessions; clients know them by name (`<deployment>/<position>`).
        name_a, name_b = "sticky-pair/0", "sticky-pair/1"
        assert set(first.values()) == {name_a, name_b}

        b.stop()
        after = {s: served_by(s) for s in sessions}
        assert set(after.values()) == {name_a}
        assert {s for s in sessions if after[s] != first[s]} == {
            s for s in sessions if first[s] == name_b
        }
        kept_run = wait_for_run(_run_of(mortar_server, tenant, name_a, sessions, first))
        assert kept_run.session_kept is True
        assert kept_run.replica == url_a  # the URL is stored, for operators
    finally:
        a.stop()
        b.stop()


def _run_of(server, tenant, name_a, sessions, first) -> str:  # type: ignore[no-untyped-def]
    session = next(s for s in sessions if first[s] == name_a)
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=orjson.dumps(
            {"model": "sticky", "messages": [{"role": "user", "content": "hi"}], "stream": False}
        ),
        headers={"Authorization": f"Bearer {tenant.secret}", "X-Mortar-Session": session},
    )
    return response.headers["X-Mortar-Run-Id"]
