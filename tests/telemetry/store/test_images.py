"""The run store's images (`telemetry.store.images`): stored once per organization by content, named
in the stored bodies, written by the run writer (idempotently), spooled and purged."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import orjson
import pytest

from accounts.models import Organization
from telemetry.models import Image, Run, RunImage
from telemetry.services.retention import PurgeCounts, organization_runs_purge
from telemetry.store.batches import write_batch
from telemetry.store.fields import ImageRecord, RunFields
from telemetry.store.images import REFERENCE_PREFIX
from telemetry.store.items import RunClosed, RunOpened, WriterItem, decode_row, encode_row
from telemetry.stored_bodies import body_with_images
from tests.conftest import Tenant
from tests.support.images import data_url, image_bytes
from tests.support.recording import SinkRun, capturing_sink

pytestmark = pytest.mark.django_db

ACCEPTED = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)


def record(
    data: bytes, param: str = "messages[0].content[1]", media_type: str = "image/png"
) -> ImageRecord:
    return ImageRecord(media_type=media_type, data=data, width=40, height=30, param=param)


def request_with(*urls: str) -> bytes:
    parts = [{"type": "text", "text": "Look"}] + [
        {"type": "image_url", "image_url": {"url": url}} for url in urls
    ]
    return orjson.dumps({"model": "v", "messages": [{"role": "user", "content": parts}]})


def opened(
    organization_id: int,
    *images: ImageRecord,
    body: bytes | None = None,
    upstream: bytes | None = None,
) -> RunOpened:
    run_id = f"chatcmpl-{secrets.token_hex(12)}"
    fields: dict[str, Any] = {
        "id": run_id,
        "accepted_at": ACCEPTED,
        "organization_id": organization_id,
        "status": Run.Status.IN_PROGRESS,
        "request_body": body,
        "upstream_request": upstream,
    }
    return RunOpened(cast(RunFields, fields), tuple(images))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_run_s_images_are_stored_and_its_bodies_name_them(tenant: Tenant) -> None:
    png, jpeg = image_bytes("image/png"), image_bytes("image/jpeg")
    png_url, jpeg_url = data_url(png), data_url(jpeg, "image/jpeg")
    body = request_with(png_url, jpeg_url, png_url)
    upstream = orjson.dumps({"messages": [{"content": [{"image_url": {"url": jpeg_url}}]}]})
    item = opened(
        tenant.organization.id,
        record(png, "messages[0].content[1]"),
        record(jpeg, "messages[0].content[2]", "image/jpeg"),
        record(png, "messages[0].content[3]"),
        body=body,
        upstream=upstream,
    )

    write_batch([item])

    run = Run.objects.get(pk=item.fields["id"])
    stored_body, stored_upstream = bytes(run.request_body), bytes(run.upstream_request)
    assert png_url.encode() not in stored_body and jpeg_url.encode() not in stored_body
    assert stored_body.count(f'"{REFERENCE_PREFIX}{sha256(png)}"'.encode()) == 2
    assert stored_upstream == orjson.dumps(
        {"messages": [{"content": [{"image_url": {"url": f"{REFERENCE_PREFIX}{sha256(jpeg)}"}}]}]}
    )
    images = {sha256(png): ("image/png", png), sha256(jpeg): ("image/jpeg", jpeg)}
    assert body_with_images(stored_body, images) == body
    assert body_with_images(stored_upstream, images) == upstream
    links = list(RunImage.objects.filter(run=run).order_by("position").select_related("image"))
    assert [(link.position, link.param, link.image.sha256) for link in links] == [
        (0, "messages[0].content[1]", sha256(png)),
        (1, "messages[0].content[2]", sha256(jpeg)),
        (2, "messages[0].content[3]", sha256(png)),
    ]
    assert links[0].image_id == links[2].image_id
    stored_png = links[0].image
    assert (stored_png.media_type, stored_png.size, bytes(stored_png.data)) == (
        "image/png",
        len(png),
        png,
    )
    assert (stored_png.organization_id, stored_png.first_seen_at) == (
        tenant.organization.id,
        ACCEPTED,
    )


def test_the_same_image_in_many_runs_and_batches_is_one_row(tenant: Tenant) -> None:
    png = image_bytes()
    body = request_with(data_url(png))
    first_batch = [opened(tenant.organization.id, record(png), body=body) for _ in range(3)]
    later = opened(tenant.organization.id, record(png), body=body)
    later.fields["accepted_at"] = ACCEPTED + timedelta(hours=1)

    write_batch(first_batch)
    write_batch([later])

    [image] = Image.objects.filter(sha256=sha256(png))
    assert image.first_seen_at == ACCEPTED  # written once, never again
    run_ids = [item.fields["id"] for item in [*first_batch, later]]
    assert (
        list(RunImage.objects.filter(run_id__in=run_ids).values_list("image_id", flat=True))
        == [image.id] * 4
    )


def test_a_replayed_batch_adds_nothing(tenant: Tenant) -> None:
    png = image_bytes()
    batch: list[WriterItem] = [
        opened(tenant.organization.id, record(png), body=request_with(data_url(png)))
    ]

    write_batch(batch)
    write_batch(batch, replay=True)
    write_batch(batch, replay=True)

    assert Image.objects.filter(sha256=sha256(png)).count() == 1
    assert RunImage.objects.filter(run_id=batch[0].fields["id"]).count() == 1


def test_each_organization_has_its_own_copy(tenant: Tenant, other_tenant: Tenant) -> None:
    png = image_bytes()

    write_batch(
        [
            opened(tenant.organization.id, record(png), body=request_with(data_url(png))),
            opened(other_tenant.organization.id, record(png), body=request_with(data_url(png))),
        ]
    )

    assert sorted(
        Image.objects.filter(sha256=sha256(png)).values_list("organization_id", flat=True)
    ) == sorted([tenant.organization.id, other_tenant.organization.id])


def test_a_body_that_escapes_slashes_keeps_its_image_whole(tenant: Tenant) -> None:
    png = image_bytes()
    escaped = request_with(data_url(png)).replace(b"/", b"\\/")

    item = opened(tenant.organization.id, record(png), body=escaped)
    write_batch([item])

    assert bytes(Run.objects.get(pk=item.fields["id"]).request_body) == escaped


def test_a_spooled_run_keeps_its_images() -> None:
    with_images = opened(1, record(b"\x89PNG..."), body=b"{}")
    without = opened(1, body=b"{}")

    assert decode_row(encode_row(with_images)) == with_images
    assert encode_row(without) == ("o", without.fields)  # as spooled before images existed
    assert decode_row(("o", without.fields)) == without


RUN_ID = "chatcmpl-" + "0" * 24
DECIDED: RunFields = {"id": RUN_ID, "accepted_at": ACCEPTED, "request_body": b"{}"}


def test_the_sink_hands_the_images_on_with_the_body() -> None:
    sink, writer = capturing_sink()

    sink.opened(SinkRun(RUN_ID, keeps_content=True), DECIDED, [record(b"png")])

    [opened_row] = writer.items
    assert isinstance(opened_row, RunOpened)
    assert opened_row.images == (record(b"png"),)


def test_under_metadata_retention_no_image_is_kept() -> None:
    sink, writer = capturing_sink()

    sink.opened(SinkRun(RUN_ID, keeps_content=False), DECIDED, [record(b"png")])

    [opened_row] = writer.items
    assert isinstance(opened_row, RunOpened)
    assert "request_body" not in opened_row.fields
    assert opened_row.images == ()


def test_under_metadata_retention_a_400_keeps_its_body_and_images() -> None:
    sink, writer = capturing_sink()
    refused: RunFields = {"status": Run.Status.REFUSED, "http_status": 400}

    sink.closed(
        SinkRun(RUN_ID, keeps_content=False),
        fields={**DECIDED, **refused},
        outcome=refused,
        opened=False,
        images=[record(b"png")],
        chunks=[],
        seconds=0.01,
        first_token_seconds=None,
        replica_name=None,
    )

    [opened_row] = writer.items
    assert isinstance(opened_row, RunOpened)
    assert opened_row.fields["request_body"] == b"{}"
    assert opened_row.images == (record(b"png"),)


def test_the_purge_deletes_images_no_run_uses_any_more() -> None:
    organization = Organization.objects.create(
        name=f"images-{secrets.token_hex(6)}", retention="full", retention_days=30
    )
    kept, dropped = image_bytes(), image_bytes()
    old = opened(organization.id, record(dropped), record(kept), body=b"{}")
    recent = opened(organization.id, record(kept), body=b"{}")
    recent.fields["accepted_at"] = ACCEPTED + timedelta(days=40)
    write_batch([old, recent])
    assert Image.objects.filter(organization=organization).count() == 2

    counts = organization_runs_purge(organization=organization, now=ACCEPTED + timedelta(days=41))

    assert counts == PurgeCounts(runs_deleted=1, images_deleted=1)
    assert list(
        Image.objects.filter(organization=organization).values_list("sha256", flat=True)
    ) == [sha256(kept)]
    assert organization_runs_purge(
        organization=organization, now=ACCEPTED + timedelta(days=41)
    ) == (PurgeCounts())


def test_stripping_a_metadata_run_drops_its_images() -> None:
    organization = Organization.objects.create(
        name=f"images-{secrets.token_hex(6)}", retention="metadata", retention_days=30
    )
    png = image_bytes()
    item = opened(organization.id, record(png), body=request_with(data_url(png)))
    item.fields["status"] = Run.Status.COMPLETED
    write_batch([item, RunClosed(item.fields["id"], {"status": Run.Status.COMPLETED})])

    counts = organization_runs_purge(organization=organization, now=ACCEPTED + timedelta(days=1))

    assert counts == PurgeCounts(runs_stripped=1, images_deleted=1)
    assert not RunImage.objects.filter(run_id=item.fields["id"]).exists()
    assert not Image.objects.filter(organization=organization).exists()
