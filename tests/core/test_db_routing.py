"""The database router without a replica behind it: which reads may go to one at all, and what
the state `/readyz` shows says. (With a real streaming replica: tests/test_database_replica.py.)"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.contrib.sessions.models import Session

from accounts.models import ApiKey
from core.db_routing import (
    PRIMARY,
    REPLICA,
    ReplicaRouter,
    ReplicaState,
    primary_reads,
    replica_reads,
    replica_state,
)
from telemetry.models import Run, RunChunk

router = ReplicaRouter()


def test_reads_outside_a_replica_block_and_every_write_go_to_the_primary() -> None:
    assert router.db_for_read(Run) is None  # Django's default: the primary
    assert router.db_for_write(Run) == PRIMARY
    with replica_reads():
        assert router.db_for_write(RunChunk) == PRIMARY


def test_sign_in_state_is_never_read_from_a_replica() -> None:
    with replica_reads():
        assert router.db_for_read(User) is None
        assert router.db_for_read(Session) is None


def test_without_a_replica_configured_a_replica_block_reads_the_primary() -> None:
    assert replica_state() is None
    with replica_reads():
        assert router.db_for_read(Run) is None
        assert router.db_for_read(ApiKey) is None


def test_primary_reads_inside_a_replica_block() -> None:
    with replica_reads() as block, primary_reads():
        assert router.db_for_read(Run) is None
    assert block.read_replica is False


def test_only_the_primary_is_migrated() -> None:
    assert router.allow_migrate(PRIMARY, "telemetry") is True
    assert router.allow_migrate(REPLICA, "telemetry") is False


def test_the_state_says_where_reads_go() -> None:
    assert ReplicaState("ok", lag_seconds=0.2).usable
    lagging = ReplicaState("lagging", lag_seconds=12.34)
    assert not lagging.usable
    assert lagging.describe() == "lagging: 12.3s behind, reads go to the primary"
    assert ReplicaState("lagging").describe().startswith("lagging: unknown")
    down = ReplicaState("unavailable", error="OperationalError: refused")
    assert down.describe() == "unavailable, reads go to the primary: OperationalError: refused"
