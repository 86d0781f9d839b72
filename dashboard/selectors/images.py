"""A run's images for its page: their thumbnails' facts, the bytes they show, and the run's
bodies as received (each `mortar-image:sha256:…` reference turned back into its data URL).

An image is only reached through a run of the organization that sent it (`telemetry.stored_bodies`):
every read here goes from the run, and checks the image is that organization's.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, QuerySet

from telemetry.models import RunImage
from telemetry.stored_bodies import stored_body_as_received


@dataclass(frozen=True)
class RunImageFacts:
    position: int
    param: str
    media_type: str
    width: int
    height: int
    size: int
    sha256: str


def _images_of(run_id: str) -> QuerySet[RunImage]:
    return RunImage.objects.filter(
        run_id=run_id, image__organization_id=F("run__organization_id")
    ).order_by("position")


def run_images(run_id: str) -> list[RunImageFacts]:
    """The images of the run's request, in the order it carried them."""
    return [
        RunImageFacts(*row)
        for row in _images_of(run_id).values_list(
            "position",
            "param",
            "image__media_type",
            "image__width",
            "image__height",
            "image__size",
            "image__sha256",
        )
    ]


def run_image(run_id: str, position: int) -> tuple[str, bytes] | None:
    """The media type and bytes of the run's image at `position`, if it has one there."""
    row = (
        _images_of(run_id)
        .filter(position=position)
        .values_list("image__media_type", "image__data")
        .first()
    )
    return None if row is None else (row[0], bytes(row[1]))


def body_as_received(run_id: str, stored: bytes | memoryview | None) -> bytes | None:
    """A body of the run as it was received (or sent upstream): its images put back in."""
    return stored_body_as_received(run_id, stored)
