"""The run store's day partitions (Postgres): created ahead and idempotently, rows that came
before their day's partition moved into it, whole days dropped by retention; SQLite keeps plain
tables and its DELETEs."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import Client

from accounts.models import Organization
from telemetry.models import Image, Run, RunChunk, RunImage
from telemetry.services.retention import PurgeCounts, runs_purge_expired
from telemetry.store import partitions

pytestmark = pytest.mark.django_db

# Days long before the partitions migrate and the scheduled task make (from today on), so
# dropping "every day before" touches only this test's days.
NOW = datetime(2024, 3, 20, 12, 0, tzinfo=UTC)
FIRST_DAY = date(2024, 3, 1)


def _org(days: int) -> Organization:
    return Organization.objects.create(name=f"days-{uuid.uuid4().hex[:12]}", retention_days=days)


def _run(org: Organization, accepted_at: datetime, *, chunks: int = 3, **fields: object) -> Run:
    run = Run.objects.create(
        id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
        organization=org,
        status=fields.pop("status", Run.Status.COMPLETED),
        accepted_at=accepted_at,
        **fields,
    )
    RunChunk.objects.bulk_create(
        RunChunk(run=run, seq=seq, offset_us=seq * 1000, data=b"data: \xff%d\n\n" % seq)
        for seq in range(chunks)
    )
    return run


def _partition_of(table: str, where: str, params: list[object]) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE {where}", params)
        return ", ".join(sorted(name for (name,) in cursor.fetchall()))


def _only_these_organizations(*kept: Organization) -> None:
    """Retention drops a day only once every organization is done with it: the suite's other
    organizations get the shortest retention, in this test's transaction."""
    Organization.objects.exclude(pk__in=[org.pk for org in kept]).update(retention_days=1)


@pytest.mark.postgres
def test_ensure_partitions_creates_each_day_once_and_moves_rows_from_the_default() -> None:
    org = _org(days=30)
    day = date(2024, 2, 10)
    early = _run(org, partitions.day_start(day) + timedelta(hours=5))
    assert _partition_of("telemetry_run", "id = %s", [early.id]) == "telemetry_run_default"
    assert partitions.default_partition_rows() >= 4  # the run and its 3 chunks

    created = partitions.ensure_partitions(day, day + timedelta(days=1))

    assert created == [
        "telemetry_runchunk_p20240210",
        "telemetry_runchunk_p20240211",
        "telemetry_run_p20240210",
        "telemetry_run_p20240211",
    ]
    assert _partition_of("telemetry_run", "id = %s", [early.id]) == "telemetry_run_p20240210"
    assert (
        _partition_of("telemetry_runchunk", "run_id = %s", [early.id])
        == "telemetry_runchunk_p20240210"
    )
    stored = RunChunk.objects.filter(run_id=early.id, run_accepted_at=early.accepted_at)
    assert [bytes(c) for c in stored.order_by("seq").values_list("data", flat=True)] == [
        b"data: \xff0\n\n",
        b"data: \xff1\n\n",
        b"data: \xff2\n\n",
    ]
    assert partitions.ensure_partitions(day, day + timedelta(days=1)) == []
    # The copies of the parent's indexes are named after them.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'telemetry_run_p20240210'"
        )
        names = {name for (name,) in cursor.fetchall()}
    assert {"telemetry_run_pkey_p20240210", "run_key_accepted_p20240210"} <= names


@pytest.mark.postgres
def test_a_chunk_whose_run_is_not_in_its_day_is_refused() -> None:
    """The check that a chunk's run is stored looks in the run's own partition."""
    org = _org(days=30)
    run = _run(org, NOW, chunks=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        RunChunk.objects.create(
            run=run, run_accepted_at=NOW + timedelta(days=1), seq=0, offset_us=0, data=b"x"
        )


def test_retention_drops_the_days_every_organization_is_done_with_and_deletes_the_rest() -> None:
    partitions.ensure_partitions(FIRST_DAY, NOW.date())
    keeps_ten = _org(days=10)
    keeps_two = _org(days=2)
    _only_these_organizations(keeps_ten, keeps_two)
    old = _run(keeps_ten, datetime(2024, 3, 5, 9, tzinfo=UTC))
    old_short = _run(keeps_two, datetime(2024, 3, 5, 10, tzinfo=UTC))
    image = Image.objects.create(
        organization=keeps_two,
        sha256="ab" * 32,
        media_type="image/png",
        width=1,
        height=1,
        size=3,
        data=b"png",
        first_seen_at=NOW,
    )
    RunImage.objects.create(run=old_short, position=0, image=image)
    kept = _run(keeps_ten, datetime(2024, 3, 15, 9, tzinfo=UTC))
    expired_short = _run(keeps_two, datetime(2024, 3, 15, 10, tzinfo=UTC))
    recent = _run(keeps_two, datetime(2024, 3, 19, 10, tzinfo=UTC))

    counts = runs_purge_expired(now=NOW, batch_size=2)

    if partitions.is_partitioned():
        # 1 to 9 March: every organization is done with them (ten days before the 20th's noon
        # is the 10th's noon). The shorter retention's run of the 15th goes by DELETE.
        assert counts == PurgeCounts(
            runs_deleted=1, chunks_deleted=3, images_deleted=1, partitions_dropped=18
        )
        assert partitions.partition_days()[0] == date(2024, 3, 10)
        assert date(2024, 3, 5) not in partitions.partition_days("telemetry_runchunk")
    else:  # SQLite: all by DELETE
        assert counts == PurgeCounts(
            runs_deleted=3, chunks_deleted=9, images_deleted=1, partitions_dropped=0
        )
    remaining = set(
        Run.objects.filter(organization__in=[keeps_ten, keeps_two]).values_list("id", flat=True)
    )
    assert remaining == {kept.id, recent.id}
    assert not RunChunk.objects.filter(run_id__in=[old.id, old_short.id, expired_short.id])
    assert RunChunk.objects.filter(run_id=kept.id).count() == 3
    assert not RunImage.objects.filter(run_id=old_short.id).exists()
    assert not Image.objects.filter(pk=image.pk).exists()  # unused once its run's day went
    # Nothing left to do: a second purge drops and deletes nothing.
    assert runs_purge_expired(now=NOW) == PurgeCounts()


@pytest.mark.postgres
def test_a_day_with_a_run_in_progress_is_not_dropped() -> None:
    partitions.ensure_partitions(FIRST_DAY, NOW.date())
    org = _org(days=5)
    _only_these_organizations(org)
    _run(org, datetime(2024, 3, 3, 9, tzinfo=UTC), status=Run.Status.IN_PROGRESS)

    dropped = partitions.drop_partitions_before(date(2024, 3, 10))

    assert dropped == [
        "telemetry_runchunk_p20240301",
        "telemetry_run_p20240301",
        "telemetry_runchunk_p20240302",
        "telemetry_run_p20240302",
    ]
    assert partitions.partition_days()[0] == date(2024, 3, 3)


def test_partitions_do_nothing_on_sqlite() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the embedded default's plain tables")
    assert partitions.ensure_partitions(FIRST_DAY, NOW.date()) == []
    assert partitions.drop_partitions_before(NOW.date()) == []
    assert partitions.default_partition_rows() == 0


@pytest.mark.postgres
def test_readyz_warns_but_stays_ready_when_a_default_partition_holds_rows() -> None:
    org = _org(days=30)
    before = Client().get("/readyz").json()
    _run(org, datetime(2023, 7, 1, 9, tzinfo=UTC))  # no partition for that day

    response = Client().get("/readyz")

    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["partitions"].startswith("warning: the default partitions hold")
    assert "partitions" not in before or before["partitions"] != body["partitions"]
