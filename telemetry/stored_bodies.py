"""A run's stored bodies as it received and sent them: each image reference in them turned back
into the image's data URL, from the images of the run's own organization (they are stored by
`telemetry.store.images`). For re-runs and the dashboard."""

from __future__ import annotations

import base64
from collections.abc import Mapping

from django.db.models import F

from telemetry.models import RunImage
from telemetry.store.images import BASE64_REFERENCE_PREFIX, REFERENCE_PREFIX, data_url


def body_with_images(body: bytes, images: Mapping[str, tuple[str, bytes]]) -> bytes:
    """A stored body with its references replaced by the images' data URLs again (sha256 →
    media type and bytes): the body as it was received."""
    for sha256, (media_type, data) in images.items():
        reference = f"{REFERENCE_PREFIX}{sha256}".encode()
        body = body.replace(b'"%s"' % reference, b'"%s"' % data_url(media_type, data))
        reference = f"{BASE64_REFERENCE_PREFIX}{sha256}".encode()
        body = body.replace(b'"%s"' % reference, b'"%s"' % base64.b64encode(data))
    return body


def stored_body_as_received(run_id: str, stored: bytes | memoryview | None) -> bytes | None:
    """A stored body of the run (as received, or as sent upstream) with its images put back:
    only the images of the run's own organization."""
    if stored is None:
        return None
    body = bytes(stored)
    if REFERENCE_PREFIX.encode() not in body and BASE64_REFERENCE_PREFIX.encode() not in body:
        return body
    images = {
        sha256: (media_type, bytes(data))
        for sha256, media_type, data in RunImage.objects.filter(
            run_id=run_id, image__organization_id=F("run__organization_id")
        ).values_list("image__sha256", "image__media_type", "image__data")
    }
    return body_with_images(body, images)
