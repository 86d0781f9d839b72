"""Day partitions under load: a day dropped while the run writer stores a batch waits for the
batch, and neither fails (the writer's batch locks the run table, then the chunk table; so must
the drop); a new partition plans searches as the table does (its statistics targets)."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection, transaction

from accounts.models import Organization
from telemetry.models import Run, RunChunk
from telemetry.store import partitions

# A day long before the partitions the migration and the scheduled task make, so dropping
# "every day before the next" touches only this test's day.
OLD_DAY = date(2023, 5, 2)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_day_dropped_while_a_writer_batch_holds_the_run_table_waits_for_it() -> None:
    organization = Organization.objects.create(name=f"locks-{uuid.uuid4().hex[:12]}")
    partitions.ensure_partitions(OLD_DAY, OLD_DAY)
    old = Run.objects.create(
        id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
        organization=organization,
        status=Run.Status.COMPLETED,
        accepted_at=datetime(2023, 5, 2, 12, tzinfo=UTC),
    )
    RunChunk.objects.create(run=old, seq=0, offset_us=0, data=b"data: {}\n\n")
    now = datetime.now(UTC)
    live_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    run_stored, go_on = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    dropped: list[str] = []

    def writer_batch() -> None:
        # A batch as the writer writes it: its new runs, then their chunks, one transaction.
        try:
            with transaction.atomic():
                Run.objects.create(
                    id=live_id,
                    organization=organization,
                    status=Run.Status.IN_PROGRESS,
                    accepted_at=now,
                )
                run_stored.set()
                go_on.wait(10)
                RunChunk.objects.create(run_id=live_id, seq=0, offset_us=0, data=b"data: {}\n\n")
        except BaseException as exc:
            errors.append(exc)
        finally:
            run_stored.set()
            connection.close()

    def drop() -> None:
        try:
            dropped.extend(partitions.drop_partitions_before(OLD_DAY + timedelta(days=1)))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    batch = threading.Thread(target=writer_batch)
    batch.start()
    assert run_stored.wait(10)
    dropping = threading.Thread(target=drop)
    dropping.start()
    dropping.join(0.5)  # the drop is now waiting for the run table (its lock timeout is 2 s)
    go_on.set()  # the batch goes on to the chunk table
    batch.join(10)
    dropping.join(10)

    assert errors == []
    assert sorted(dropped) == sorted(
        partitions.partition_name(table, OLD_DAY)
        for table in (partitions.RUN_TABLE, partitions.CHUNK_TABLE)
    )
    assert not Run.objects.filter(pk=old.pk).exists()
    assert RunChunk.objects.filter(run_id=live_id).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_new_day_partition_keeps_the_run_tables_statistics_targets() -> None:
    # The search vector's 1,000 most common words: without them on the partition, a rare word
    # is planned as a common one (a walk through the day's runs instead of the GIN index).
    day = date(2023, 6, 9)
    partitions.ensure_partitions(day, day)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attstattarget FROM pg_attribute WHERE attrelid = to_regclass(%s)"
            " AND attname = 'search'",
            [partitions.partition_name(partitions.RUN_TABLE, day)],
        )
        assert cursor.fetchone() == (1000,)
