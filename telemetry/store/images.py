"""The run store's images: each stored once per organization by its content hash, and named in
the run's stored bodies instead of repeating its bytes.

A run's request body (and the body sent upstream) is stored with each data URL of an image it
carried replaced by a reference, `mortar-image:sha256:<64 hex>` — and each bare base64 string of
one (a Messages `image` block's `source.data`) by `mortar-image-base64:sha256:<64 hex>`; the
image itself is one `Image` row per organization and hash, and `RunImage` rows say which run
carried which image where, so the same screenshot sent in 50 turns of an agent loop is stored
once. The data URL is the canonical base64 of the bytes (the gateway refuses any other), so the
body as received is restored exactly from the reference (`telemetry.stored_bodies`).

The hashing, the references and the writes run on the run writer's thread, inside the batch's
transaction (`telemetry.store.batches.write_batch`), never on a request's event loop.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from telemetry.models import Image, RunImage
from telemetry.store.fields import ImageRecord, RunFields

REFERENCE_PREFIX = "mortar-image:sha256:"  # stands for the image's data URL
BASE64_REFERENCE_PREFIX = "mortar-image-base64:sha256:"  # for its bare base64 (Messages)


@dataclass(frozen=True, slots=True)
class HashedImage:
    sha256: str
    record: ImageRecord

    @property
    def reference(self) -> bytes:
        return f"{REFERENCE_PREFIX}{self.sha256}".encode()

    @property
    def base64_reference(self) -> bytes:
        return f"{BASE64_REFERENCE_PREFIX}{self.sha256}".encode()


@dataclass(frozen=True, slots=True)
class RunImages:
    """A new run's images, to store with it."""

    run_id: str
    organization_id: int
    seen_at: datetime
    images: Sequence[HashedImage]


def hashed(images: Iterable[ImageRecord]) -> list[HashedImage]:
    return [HashedImage(hashlib.sha256(image.data).hexdigest(), image) for image in images]


def data_url(media_type: str, data: bytes) -> bytes:
    """The image's data URL: the only form the gateway accepts, so the one a body held."""
    return b"data:" + media_type.encode() + b";base64," + base64.b64encode(data)


def fields_with_references(fields: RunFields, images: Sequence[HashedImage]) -> RunFields:
    """The run's fields with each image's data URL in its stored bodies replaced by its
    reference. A body whose JSON spells a URL with escapes (`\\/`, `\\u…`) keeps that URL whole,
    so every stored body turns back into the body as received, byte for byte."""
    replaced: RunFields = {**fields}
    request_body, upstream_request = fields.get("request_body"), fields.get("upstream_request")
    if request_body is not None:
        replaced["request_body"] = _with_references(request_body, images)
    if upstream_request is not None:
        replaced["upstream_request"] = _with_references(upstream_request, images)
    return replaced


def _with_references(body: bytes, images: Sequence[HashedImage]) -> bytes:
    done: set[str] = set()
    for image in images:
        if image.sha256 not in done:
            done.add(image.sha256)
            # Quoted: the URL is a whole JSON string, never the start of a longer one.
            encoded = base64.b64encode(image.record.data)
            url = data_url(image.record.media_type, image.record.data)
            body = body.replace(b'"%s"' % url, b'"%s"' % image.reference)
            body = body.replace(b'"%s"' % encoded, b'"%s"' % image.base64_reference)
    return body


def run_images_write(runs: Sequence[RunImages]) -> None:
    """Store new runs' images (inside the writer's transaction, after the runs themselves).

    Idempotent, as a replayed batch needs: an image already stored is neither sent nor written
    again, one stored meanwhile by another worker is skipped as a conflict, and a run's image
    already linked stays as it is.
    """
    wanted: dict[tuple[int, str], tuple[HashedImage, datetime]] = {}
    for run in runs:
        for image in run.images:
            wanted.setdefault((run.organization_id, image.sha256), (image, run.seen_at))
    stored = _stored_ids(wanted)
    missing = [key for key in wanted if key not in stored]
    if missing:
        Image.objects.bulk_create(
            [_image_row(key[0], *wanted[key]) for key in missing], ignore_conflicts=True
        )
        stored.update(_stored_ids(missing))
    RunImage.objects.bulk_create(
        [
            RunImage(
                run_id=run.run_id,
                position=position,
                image_id=stored[run.organization_id, image.sha256],
                param=image.record.param,
            )
            for run in runs
            for position, image in enumerate(run.images)
        ],
        ignore_conflicts=True,
    )


def _image_row(organization_id: int, image: HashedImage, seen_at: datetime) -> Image:
    record = image.record
    return Image(
        organization_id=organization_id,
        sha256=image.sha256,
        media_type=record.media_type,
        width=record.width,
        height=record.height,
        size=len(record.data),
        data=record.data,
        first_seen_at=seen_at,
    )


def _stored_ids(keys: Iterable[tuple[int, str]]) -> dict[tuple[int, str], int]:
    """The ids of the images already stored, by (organization id, sha256)."""
    by_organization: dict[int, list[str]] = {}
    for organization_id, sha256 in keys:
        by_organization.setdefault(organization_id, []).append(sha256)
    found: dict[tuple[int, str], int] = {}
    for organization_id, hashes in by_organization.items():
        rows = Image.objects.filter(organization_id=organization_id, sha256__in=hashes)
        for pk, sha256 in rows.values_list("pk", "sha256"):
            found[organization_id, sha256] = pk
    return found
